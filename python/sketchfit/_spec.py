"""Estimator parameters as pipeline-file text: the estimators mirror the pipeline file,
and the Rust core checks the result exactly as it checks a file (an unknown key or a
bad value names the key)."""

from __future__ import annotations

import json
import math

import numpy as np


def value(v) -> str:
    """One TOML value."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "nan"
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return repr(f)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"a pipeline value must be a number, string, boolean or list, got {type(v).__name__}")


def table(name: str, entries: dict) -> str:
    body = "".join(f"{json.dumps(str(k))} = {value(v)}\n" for k, v in entries.items() if v is not None)
    return f"[{name}]\n{body}"


def pipeline_text(*, task: str, data: dict, stages: list, pca: dict | None, ridge: dict, run: dict, passes: int = 1, solver: dict | None = None) -> str:
    parts = [f"task = {value(task)}\npasses = {value(passes)}\n", table("data", {"train": [], **data})]
    for s in stages:
        parts.append("[[stages]]\n" + "".join(f"{json.dumps(str(k))} = {value(v)}\n" for k, v in s.items() if v is not None))
    if pca:
        parts.append(table("pca", pca))
    parts.append(table("ridge", ridge))
    if solver:
        parts.append(table("solver", solver))
    parts.append(table("run", run))
    return "\n".join(parts)


def stage_dicts(stages) -> list:
    """Stages as given to an estimator: dicts of pipeline keys, or sketch transformers."""
    out = []
    for i, s in enumerate(stages):
        if isinstance(s, dict):
            if "kind" not in s:
                raise ValueError(f"stages[{i}] needs a 'kind' (for example 'tensor_sketch' or 'rff')")
            out.append(dict(s))
        elif hasattr(s, "stage_dict"):
            out.append(s.stage_dict())
        else:
            raise TypeError(f"stages[{i}]: expected a dict of stage keys or a sketch transformer, got {type(s).__name__}")
    return out


def seed_of(random_state) -> int:
    """An integer seed, as the pipeline's run.seed: an int is used as is (so the
    command line's seed gives the same model), None or a RandomState draws one."""
    if random_state is None or isinstance(random_state, np.random.RandomState):
        rs = np.random.mtrand._rand if random_state is None else random_state
        return int(rs.randint(0, 2**31 - 1))
    if isinstance(random_state, (int, np.integer)):
        if random_state < 0:
            raise ValueError(f"random_state must be ≥ 0, got {random_state}")
        return int(random_state)
    raise ValueError(f"random_state must be None, an int or a RandomState, got {random_state!r}")

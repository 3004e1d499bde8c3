"""Every Python example of the README and the book runs: each ```python block, in page
order, in one scratch directory that sees the shipped data (``data/``), so a later block
may read what an earlier one wrote. A block whose first line says it is a recipe (it needs
a cluster or the reader's files) is tested as code elsewhere and named there."""

import os
import re

import pytest

from conftest import REPO

PAGES = [REPO / "README.md", REPO / "docs" / "src" / "guide" / "python.md", REPO / "docs" / "src" / "reference" / "model-files.md"]


def _blocks():
    out = []
    for page in PAGES:
        for m in re.finditer(r"^```python\n(.*?)^```", page.read_text(), re.M | re.S):
            out.append((page.relative_to(REPO), m.group(1)))
    return out


def test_every_python_example_runs(tmp_path, monkeypatch):
    blocks = _blocks()
    assert len(blocks) >= 5, blocks
    os.symlink(REPO / "data", tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    ran = 0
    for page, code in blocks:
        if code.startswith("# A recipe"):
            assert "python/tests/" in code.splitlines()[0], f"{page}: a recipe names the test that runs it"
            continue
        try:
            exec(compile(code, f"{page}", "exec"), {"__name__": "__docs__"})
        except Exception as e:  # noqa: BLE001 - the page and the block are the report
            pytest.fail(f"{page}: the example fails: {e!r}\n{code}")
        ran += 1
    assert ran >= 3

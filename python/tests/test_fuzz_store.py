"""The property test of "nothing lost" over the object store: a seeded generator of runs
over store layouts (globs, scheme aliases, missing objects and buckets, existing
outputs, checkpoint URLs onto the model, a training object or a stranger), the landmark
map's keys and candidates, memory limits and solver choices, against the local S3
server. Every run must end in exit 0 with a model that reads back, or exit 2 with a
message; never a panic or a network fault, and never with an object or file that existed
before changed or gone. ``SKETCHFIT_STORE_FUZZ_CASES`` (default 48) and
``SKETCHFIT_STORE_FUZZ_SEED`` (default 20261207) set the run."""

import os
import random

import pytest

from test_remote import _digits_parts, _get, _upload, run

CASES = int(os.environ.get("SKETCHFIT_STORE_FUZZ_CASES", "48"))
SEED = int(os.environ.get("SKETCHFIT_STORE_FUZZ_SEED", "20261207"))

STAGES = [
    '[[stages]]\nkind = "rff"\ndim = {dim}\n',
    '[[stages]]\nkind = "nystrom"\nkernel = "gaussian"\ndim = {dim}\njitter = {jitter}\n',
    '[[stages]]\nkind = "nystrom"\ndegree = 2\noffset = 0.0\ndim = {dim}\njitter = {jitter}\n',
    '[[stages]]\nkind = "nystrom"\nkernel = "gaussian"\nsigma = 3.0\ndim = 16\ncandidates = {{ dim = [8, {dim}] }}\n',
]


def _case(rng, bucket, tmp_path, n):
    """One run: half the cases draw only choices that can train, so that enough of them
    do; the others draw from everything, the hostile spellings among it."""
    valid = rng.random() < 0.5
    pick = lambda good, bad: rng.choice(good if valid else good + bad)  # noqa: E731
    train = pick([
        f"s3://{bucket}/train/part-*.parquet",
        f"s3a://{bucket}/train/part-*.parquet",
        f"s3://{bucket}/train/part-0.parquet",
        str(tmp_path / "part-*.parquet"),
    ], [
        f"s3://{bucket}/train/missing.parquet",
        f"s3://no-such-bucket-{n}/train/*.parquet",
    ])
    output = pick([
        f"s3://{bucket}/out/m{n}.sfm",
        f"s3a://{bucket}/out/m{n}.sfm",
        str(tmp_path / f"m{n}.sfm"),
    ], [
        f"s3://{bucket}/other/notes.txt",
        f"s3a://{bucket}/train/part-1.parquet",
        f"s3://{bucket}/train/part-0.parquet",
        str(tmp_path / "notes.txt"),
        str(tmp_path / "part-0.parquet"),
    ])
    checkpoint = pick([
        None,
        f"s3://{bucket}/ckpt/c{n}.ckpt",
        str(tmp_path / f"c{n}.ckpt"),
    ], [
        output,
        output.replace("s3://", "s3a://", 1),
        f"s3://{bucket}/other/notes.txt",
        f"s3a://{bucket}/train/part-0.parquet",
        f"s3://{bucket}//train/./part-1.parquet",
        str(tmp_path / "notes.txt"),
        str(tmp_path / "part-1.parquet"),
    ])
    jitter = pick(["1e-6", "1e-50", "1e-300"], ["0.5", "0", "1.5"])
    stage = rng.choice(STAGES).format(dim=rng.choice([8, 32, 64, 96]), jitter=jitter)
    candidates = "candidates" in stage
    lam = rng.choice(["0.01", "1.0", '"gcv"'])
    ridge = "cv = 2\n" if candidates else f"lambda = {lam}\n"
    if not candidates:
        ridge += f'solver = "{pick(["auto", "cholesky", "eigen"], ["cholesky_f32", "tridiagonal", "dual"])}"\n'
    limit = pick([None, 4096, 2**40], [1, 8, 64, 2**44])
    text = (f'task = "classification"\n[data]\ntrain = ["{train}"]\nfeatures = ["px*"]\nlabel = "label"\n'
            f'{stage}[ridge]\n{ridge}[run]\nseed = {n}\nsample_rows = {rng.choice([10, 100, 1000])}\n'
            f'checkpoint_every = {rng.choice([0, 1, 256])}\nchunk_rows = 100\n')
    if limit is not None:
        text += f"memory_limit_mib = {limit}\n"
    if checkpoint is not None:
        text += f'checkpoint = "{checkpoint}"\n'
    return text, output, rng.random() < (0.1 if valid else 0.3)


def test_no_run_over_the_store_loses_anything_it_did_not_make(env, s3, bucket, tmp_path):
    files = _digits_parts(tmp_path, parts=2)
    _upload(s3, bucket, files)
    s3.put_object(Bucket=bucket, Key="other/notes.txt", Body=b"someone's object")
    (tmp_path / "notes.txt").write_bytes(b"someone's file")

    def objects():
        listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        return {o["Key"]: _get(s3, bucket, o["Key"]) for o in listed}

    def local():
        return {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}

    rng = random.Random(SEED)
    outcomes = {0: 0, 2: 0}
    for n in range(CASES):
        text, output, resume = _case(rng, bucket, tmp_path, n)
        toml = tmp_path / f"p{n}.pipeline"
        toml.write_text(text)
        before_s3, before_local = objects(), local()
        args = ["train", toml, "-o", output, "--quiet"] + (["--resume"] if resume else [])
        r = run(env, *args, cwd=tmp_path)
        said = f"case {n} (seed {SEED}): {text}-o {output} resume={resume}: exit {r.returncode}: {r.stderr}"
        assert r.returncode in (0, 2), said
        assert "panicked" not in r.stderr and "internal error" not in r.stderr, said
        after_s3, after_local = objects(), local()
        for key, blob in before_s3.items():
            assert after_s3.get(key) == blob, f"{said}\nobject {key} changed or gone"
        for name, blob in before_local.items():
            assert after_local.get(name) == blob, f"{said}\nfile {name} changed or gone"
        new = set(after_s3) - set(before_s3) | {f"local:{k}" for k in set(after_local) - set(before_local)}
        if r.returncode == 0:
            # The model, and nothing else of the run's, is left; it reads back verified.
            assert len(new) == 1, f"{said}\nleft {new}"
            assert run(env, "inspect", output).returncode == 0, said
        else:
            # A run stopped after its pass started keeps its checkpoint for --resume.
            assert not {k for k in new if not k.endswith(".ckpt")}, f"{said}\nleft {new}"
        outcomes[r.returncode] += 1
    print(f"store fuzz: {CASES} cases at seed {SEED}: {outcomes[0]} trained, {outcomes[2]} refused with exit 2")
    assert outcomes[0] > 0 and outcomes[2] > 0

"""scripts/deform.py on the shipped digits: K copies per row in the input's columns and
types, the labels carried, the same copies for the same seed, no deformation at zero
parameters, a refused existing output, a preview PNG, and copies the digits model still
mostly recognises."""

import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq

from conftest import REPO

SCRIPT = REPO / "scripts" / "deform.py"
DIGITS = REPO / "data" / "digits_train.parquet"


def deform(out, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), str(DIGITS), "-o", str(out), *map(str, extra)],
                          capture_output=True, text=True)


def test_deformed_copies_keep_columns_labels_and_seed(tmp_path, cli):
    r = deform(tmp_path / "a.parquet", "-k", 2, "--preview", tmp_path / "a.png")
    assert r.returncode == 0, r.stderr
    src, out = pq.read_table(DIGITS), pq.read_table(tmp_path / "a.parquet")
    assert out.num_rows == 2 * src.num_rows
    assert out.schema.field("px0").type == src.schema.field("px0").type
    # Copies of one input row group go out as K row groups of its rows, labels in order.
    groups = pq.ParquetFile(DIGITS)
    labels = [groups.read_row_group(g, columns=["label"]).column(0).to_numpy() for g in range(groups.num_row_groups)]
    assert np.array_equal(out.column("label").to_numpy(), np.concatenate([lab for g in labels for lab in (g, g)]))
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The same seed gives the same copies; another seed other ones.
    assert deform(tmp_path / "b.parquet", "-k", 2).returncode == 0
    assert pq.read_table(tmp_path / "b.parquet").equals(out)
    assert deform(tmp_path / "c.parquet", "-k", 2, "--seed", 3).returncode == 0
    assert not pq.read_table(tmp_path / "c.parquet").equals(out)
    # Zero parameters give the originals exactly.
    assert deform(tmp_path / "z.parquet", "-k", 1, "--shift", 0, "--rotate", 0, "--alpha", 0).returncode == 0
    assert pq.read_table(tmp_path / "z.parquet").equals(src.select(out.column_names))
    # An existing output is refused and kept.
    before = (tmp_path / "a.parquet").read_bytes()
    r = deform(tmp_path / "a.parquet")
    assert r.returncode != 0 and "exists" in r.stderr
    assert (tmp_path / "a.parquet").read_bytes() == before
    # The shipped digits model, trained on the originals, recognises most copies (at 8 × 8
    # a pixel of shift is an eighth of the image: the margin is wide here).
    cli("train", REPO / "pipelines" / "digits.toml", "-o", tmp_path / "m.sfm", "--quiet")
    said = cli("evaluate", tmp_path / "m.sfm", "-i", tmp_path / "a.parquet")
    accuracy = float(next(line for line in said.splitlines() if line.startswith("accuracy:")).split()[1])
    assert accuracy > 0.8, said


def test_jitter_moves_each_copy_by_its_whole_pixel_offset(tmp_path):
    r = deform(tmp_path / "j.parquet", "-k", 3, "--jitter")
    assert r.returncode == 0, r.stderr
    src, out = pq.read_table(DIGITS), pq.read_table(tmp_path / "j.parquet")
    cols = [c for c in out.column_names if c.startswith("px")]
    side = int(len(cols) ** 0.5)
    groups = pq.ParquetFile(DIGITS)
    first = groups.read_row_group(0, columns=cols)
    n = first.num_rows
    img = np.column_stack([first.column(c).to_numpy() for c in cols]).reshape(n, side, side)
    copies = np.column_stack([out.column(c).to_numpy() for c in cols])[: 3 * n].reshape(3, n, side, side)
    # Copy 0 moves right by one (column 0 empty), copy 1 left, copy 2 down; nothing else changes.
    assert np.array_equal(copies[0][:, :, 1:], img[:, :, :-1]) and not copies[0][:, :, 0].any()
    assert np.array_equal(copies[1][:, :, :-1], img[:, :, 1:]) and not copies[1][:, :, -1].any()
    assert np.array_equal(copies[2][:, 1:, :], img[:, :-1, :]) and not copies[2][:, 0, :].any()
    assert out.num_rows == 3 * src.num_rows
    r = deform(tmp_path / "k.parquet", "-k", 9, "--jitter")
    assert r.returncode != 0 and "at most 8" in r.stderr

#!/usr/bin/env python3
"""Deformed copies of image rows, for training on more rows than a data set has: the
infinite-MNIST idea (Loosli, Canu & Bottou 2007) of small random translations, rotations
and elastic deformations (Simard, Steinkraus & Platt 2003) applied to training images.

    python3 scripts/deform.py data/mnist/fit.parquet -o data/mnist/fit_x8.parquet -k 8

Each input row is a square image of `side × side` pixels (`px0 … px{side²−1}` in row-major
order, any numeric type; `side` is inferred) with its `label`. For each of the K copies of
each image the script draws, from a seeded generator:

- a translation of up to `--shift` pixels in each direction (uniform),
- a rotation of up to `--rotate` degrees about the centre (uniform),
- an elastic displacement field: each pixel's displacement uniform in [−1, 1] per axis,
  smoothed by a Gaussian of `--sigma` pixels and multiplied by `--alpha` (Simard et al.'s
  convention: the smoothing shrinks the field, so α = 34 at σ = 4 moves a pixel by about
  1.4 pixels),

composes them into one sampling map and resamples the image bilinearly (outside the image
is 0). The defaults (1 px, 8°, σ = 4, α = 20 at 28 × 28; shift and σ scale with side / 28,
α with its square) keep a digit recognisable — Simard et al.'s α = 34 is at the edge of
that, and these copies are meant to add rows near the data, not new shapes. The pipelines
choose the parameters on the holdout rows (never on test rows). Only training images may go in: deform `fit.parquet`
(or `train.parquet` for a final run), never the holdout or the test file.

`--jitter` makes a different kind of copy: copy k is every image moved by the k-th whole-pixel
offset (the four one-pixel moves, then the four diagonals; at most 8 copies), with no
resampling — DeCoste and Schölkopf's virtual examples. A bilinear copy at a fractional
offset is blurred, which the test images never are; a whole-pixel move is as sharp as its
original. The random generator is not drawn from, so `--seed` has no effect.

Memory is bounded: the input is read a row group at a time and each row group's copies are
written as they are made (copies of one input row group go out in K row groups, copy k of
every row of it in the k-th, so a reader streams them). The output is written beside its
target as a `.tmp`, read back (row count, schema, every column decoded), then
renamed; an existing output is refused. The originals are not copied into the output: train
on both files. `--preview PNG` writes a grid of originals (left column) and their first
copies for a look.

Needs numpy, scipy and pyarrow.
"""
import argparse
import hashlib
import math
import os
import pathlib
import struct
import sys
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scipy import ndimage


def pixel_columns(schema: pa.Schema) -> list:
    cols = [n for n in schema.names if n.startswith("px")]
    cols.sort(key=lambda n: int(n[2:]))
    side = math.isqrt(len(cols))
    if side * side != len(cols) or cols != [f"px{i}" for i in range(len(cols))]:
        raise SystemExit(f"the pixel columns must be px0 … px(side²−1) of a square image; found {len(cols)}")
    return cols


def sampling_map(rng: np.random.Generator, side: int, args) -> tuple:
    """The source coordinates of every output pixel: rotation and translation about the
    centre, then the smoothed random displacement."""
    scale = side / 28.0
    c = (side - 1) / 2.0
    y, x = np.mgrid[0:side, 0:side].astype(np.float64)
    theta = math.radians(rng.uniform(-args.rotate, args.rotate))
    ty, tx = rng.uniform(-args.shift * scale, args.shift * scale, size=2)
    cos, sin = math.cos(theta), math.sin(theta)
    sy = cos * (y - c) - sin * (x - c) + c - ty
    sx = sin * (y - c) + cos * (x - c) + c - tx
    if args.alpha > 0:
        # Simard et al.'s field: uniform in [-1, 1], smoothed, times α. Its typical size
        # falls as 1/σ; with σ scaled by side/28, α scaled by its square keeps the
        # displacement the same share of the image at any size.
        for grid in (sy, sx):
            field = rng.uniform(-1.0, 1.0, size=(side, side))
            field = ndimage.gaussian_filter(field, sigma=args.sigma * scale, mode="constant")
            grid += args.alpha * scale * scale * field
    return sy, sx


# The integer translations of `--jitter`, nearest first: the four one-pixel moves, then the
# four diagonal ones (DeCoste & Schölkopf's virtual examples).
JITTER = [(0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1)]


def translate(images: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """Each `side × side` image moved by whole pixels, what enters from outside 0: no
    resampling, so the copy is as sharp as the original."""
    n, d = images.shape
    side = math.isqrt(d)
    src = images.reshape(n, side, side)
    out = np.zeros_like(src, dtype=np.float64)
    ys, yd = (slice(0, side - dy), slice(dy, side)) if dy >= 0 else (slice(-dy, side), slice(0, side + dy))
    xs, xd = (slice(0, side - dx), slice(dx, side)) if dx >= 0 else (slice(-dx, side), slice(0, side + dx))
    out[:, yd, xd] = src[:, ys, xs]
    return out.reshape(n, d)


def deform(images: np.ndarray, rng: np.random.Generator, args) -> np.ndarray:
    """One deformed copy of each `side × side` image (rows of `images`), float64."""
    n, d = images.shape
    side = math.isqrt(d)
    out = np.empty((n, d))
    for i in range(n):
        sy, sx = sampling_map(rng, side, args)
        img = images[i].reshape(side, side)
        out[i] = ndimage.map_coordinates(img, [sy, sx], order=1, mode="constant", cval=0.0).ravel()
    return out


def as_type(values: np.ndarray, typ: pa.DataType, top: float) -> pa.Array:
    """The deformed values in the input column's type: integers rounded and clipped to
    [0, the input's largest value], floats clipped to [0, top]."""
    values = np.clip(values, 0.0, top)
    if pa.types.is_integer(typ):
        return pa.array(np.rint(values).astype(typ.to_pandas_dtype()), type=typ)
    return pa.array(values.astype(typ.to_pandas_dtype()), type=typ)


def png(path: pathlib.Path, pixels: np.ndarray) -> None:
    """A greyscale PNG of `pixels` (uint8, rows × columns), with no dependency."""
    rows = b"".join(b"\x00" + bytes(r) for r in pixels.astype(np.uint8))

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    h, w = pixels.shape
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
    data += chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")
    path.write_bytes(data)


def column_digest(table: pa.Table) -> str:
    h = hashlib.sha256()
    for name in table.column_names:
        for chunk in table.column(name).chunks:
            h.update(name.encode())
            h.update(np.ascontiguousarray(chunk.to_numpy(zero_copy_only=False)).tobytes())
    return h.hexdigest()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", type=pathlib.Path, help="a Parquet file of training images (never holdout or test rows)")
    ap.add_argument("-o", "--output", type=pathlib.Path, required=True)
    ap.add_argument("-k", "--copies", type=int, default=4, help="deformed copies of each image (default 4)")
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--shift", type=float, default=1.0, help="largest translation in pixels at 28 × 28 (default 1)")
    ap.add_argument("--rotate", type=float, default=8.0, help="largest rotation in degrees (default 8)")
    ap.add_argument("--sigma", type=float, default=4.0, help="smoothing of the displacement field, pixels at 28 × 28 (default 4)")
    ap.add_argument("--alpha", type=float, default=20.0, help="scale of the elastic field at 28 × 28 (default 20)")
    ap.add_argument(
        "--jitter",
        action="store_true",
        help="copy k is each image moved by the k-th whole-pixel offset (up to 8: the four "
        "one-pixel moves, then the diagonals) instead of a random deformation",
    )
    ap.add_argument("--preview", type=pathlib.Path, help="also write a PNG grid: originals, then their first copies")
    args = ap.parse_args(argv)
    if args.copies < 1:
        ap.error("--copies must be at least 1")
    if args.jitter and args.copies > len(JITTER):
        ap.error(f"--jitter makes at most {len(JITTER)} copies (one per whole-pixel offset)")
    if args.output.exists():
        ap.error(f"{args.output} exists; remove it or choose another name")
    if args.output.resolve() == args.input.resolve():
        ap.error("the output would replace the input")
    source = pq.ParquetFile(args.input)
    schema = source.schema_arrow
    cols = pixel_columns(schema)
    if "label" not in schema.names:
        raise SystemExit(f"{args.input}: no label column")
    rng = np.random.default_rng(args.seed)
    tmp = args.output.with_name(f".{args.output.name}.tmp")
    out_schema = pa.schema([schema.field(c) for c in cols] + [schema.field("label")])
    top = None
    written = 0
    preview = []
    try:
        with pq.ParquetWriter(tmp, out_schema) as writer:
            for g in range(source.num_row_groups):
                part = source.read_row_group(g, columns=cols + ["label"])
                images = np.column_stack([part.column(c).to_numpy(zero_copy_only=False) for c in cols]).astype(np.float64)
                top = float(images.max()) if top is None else max(top, float(images.max()))
                for k in range(args.copies):
                    copy = translate(images, *JITTER[k]) if args.jitter else deform(images, rng, args)
                    arrays = [as_type(copy[:, j], schema.field(c).type, top) for j, c in enumerate(cols)]
                    writer.write_table(pa.Table.from_arrays(arrays + [part.column("label")], schema=out_schema))
                    written += part.num_rows
                    if args.preview and g == 0 and k == 0:
                        preview = [images[:8], copy[:8]]
        back = pq.read_table(tmp)
        if back.num_rows != written or back.schema != out_schema:
            raise SystemExit(f"{tmp}: read back {back.num_rows} rows, wrote {written}")
        column_digest(back)  # every column decodes, or this raises
        os.replace(tmp, args.output)
    finally:
        if tmp.exists():
            tmp.unlink()
    if args.preview and preview:
        originals, copies = preview
        side = math.isqrt(len(cols))
        scale = 255.0 / max(top, 1e-12)
        tiles = [np.hstack([o.reshape(side, side), c.reshape(side, side)]) for o, c in zip(originals, copies)]
        grid = np.vstack(tiles) * scale
        grid = np.kron(grid, np.ones((4, 4)))  # 4 × 4 pixels a pixel, for a look
        png(args.preview, np.clip(grid, 0, 255))
    print(f"{written} deformed rows ({args.copies} per input row) written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

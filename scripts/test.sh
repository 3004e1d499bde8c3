#!/usr/bin/env bash
# Every test: the Rust suite (`cargo test`), then the Python package built from this
# tree (maturin, the default optimised profile, so it reuses cargo's build) and its
# pytest suite, which also drives the command line for the interop tests. Needs the
# Rust toolchain and CPython ≥ 3.9 with pip; installs the Python test dependencies
# from PyPI itself.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test

pip() { python3 -m pip --disable-pip-version-check "$@"; }
pip install --quiet maturin pytest numpy pyarrow scikit-learn polars pandas "dask[delayed]" distributed
cargo build --quiet --bin sketchfit
MATURIN_PEP517_ARGS="--profile dev" pip install --quiet --force-reinstall --no-deps ./python
SKETCHFIT_BIN="$PWD/target/debug/sketchfit" python3 -m pytest -q -p no:cacheprovider python/tests

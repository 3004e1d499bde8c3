#!/usr/bin/env bash
# Every test: the Rust suite (`cargo test`), then the Python package built from this
# tree (maturin, the default optimised profile, so it reuses cargo's build) and its
# pytest suite, which also drives the command line for the interop tests.
#
# Needs the Rust toolchain and CPython >= 3.9. Nothing is installed outside the checkout:
# the Python test dependencies and the package go into a private virtual environment,
# target/py-venv, made on the first run and reused after it. The package is rebuilt only
# when its sources (src/, python/, the manifests) changed since the last install, and the
# dependencies are installed again only when their list below changes. This works on an
# externally managed system Python (PEP 668): when `python3 -m venv` cannot bring pip
# (Debian without python3-venv), virtualenv is installed under target/ and makes the
# environment instead.
set -euo pipefail
cd "$(dirname "$0")/.."

# With the fault-injection hooks (a kill at an exact unit, or inside the solve) that the
# resume tests drive; default and release builds leave them out. The binary the Python
# tests drive and the Python package are built with the same features, so the library
# is compiled once.
features=fault-injection
cargo test --features "$features"

venv=target/py-venv
deps=(maturin pytest numpy pyarrow scikit-learn polars pandas safetensors "dask[delayed,distributed]" "moto[server]>=5.2,<5.3" pyspark ray)
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  if ! "$python" -m venv "$venv" >/dev/null 2>&1 || ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$venv"
    # pip's --target install is allowed on an externally managed Python; virtualenv
    # carries its own pip wheel, so the environment gets pip without ensurepip.
    "$python" -m pip --disable-pip-version-check install --quiet --target target/py-tools virtualenv
    PYTHONPATH=target/py-tools "$python" -m virtualenv --quiet "$venv"
  fi
fi
vpy="$PWD/$venv/bin/python"
pip() { "$vpy" -m pip --disable-pip-version-check "$@"; }

stamp() { printf '%s\n' "$@" | sha256sum | cut -d' ' -f1; }
deps_stamp=$(stamp "${deps[@]}")
if [ "$(cat "$venv/.deps-stamp" 2>/dev/null)" != "$deps_stamp" ]; then
  pip install --quiet "${deps[@]}"
  echo "$deps_stamp" >"$venv/.deps-stamp"
fi

cargo build --quiet --features "$features" --bin sketchfit

pkg_stamp=$(find src python/src python/sketchfit python/Cargo.toml python/pyproject.toml Cargo.toml Cargo.lock \
  -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat "$venv/.pkg-stamp" 2>/dev/null)" != "$pkg_stamp" ]; then
  MATURIN_PEP517_ARGS="--profile dev --features sketchfit/$features" pip install --quiet --force-reinstall --no-deps ./python
  echo "$pkg_stamp" >"$venv/.pkg-stamp"
else
  echo "python package unchanged since the last install in $venv: not rebuilt"
fi

# A local S3 server for the object-store tests (python/tests/test_remote.py), on loopback
# only, stopped by its pid when this script ends; the tests give every client dummy
# credentials, so none asks a cloud metadata address.
port=$("$vpy" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >target/moto_server.log 2>&1 &
moto_pid=$!
trap 'kill "$moto_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  "$vpy" -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null && break
  sleep 0.1
done
export SKETCHFIT_TEST_S3="http://127.0.0.1:$port"

# -W error::RuntimeWarning: a RuntimeWarning (an invalid cast, an overflow) anywhere in a
# test fails the run, so the package never hands NumPy values it cannot take.
SKETCHFIT_BIN="$PWD/target/debug/sketchfit" "$vpy" -m pytest -q -p no:cacheprovider -W error::RuntimeWarning python/tests

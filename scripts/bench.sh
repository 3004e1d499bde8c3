#!/usr/bin/env bash
# Benchmarks (not tests): the training pass and the solves, each next to its reference
# measured in the same run. Every figure in the README's Benchmarks section comes from
# one of the sections below; run a section alone with SECTIONS="pass solve".
#
#   hot      cargo bench: tile GEMMs, maps, FWHT (one kernel at a time)
#   pass     train on 60,000 × 784 f32 (7,500-row row groups, 10 classes), tensor sketch
#            p = 3 on L2-normalised rows, fixed λ, at D = 2048 / 4096 / 8192 in f64 and
#            f32, with the pass's time split, next to a plain full GEMM ZᵀZ of the same
#            total shape on all cores (examples/gemm_ref) and numpy's z.T @ z (SYRK) of the
#            same shape on precomputed features (scripts/blas_ref.py)
#   large    the same pass on a 1M-row file (about 3 GB), for the flat-memory check
#   solve    statistics at D = 2048 … 16384 from the 60k file (accumulate), then every
#            solve path on them: cholesky and cholesky_f32 (fixed λ, next to scipy's
#            cho_factor of a D × D in f64 and f32), tridiagonal (GCV, and λ by a 10,000-row
#            validation file), eigen (dense, up to DENSE_MAX_D = 8192), and top-D/16 PCA
#            by block Krylov (up to KRYLOV_MAX_D = 16384) vs dense
#   score    predict of 1.2M × 784 f32 rows (row groups of 30,000) by a degree-3 tensor
#            sketch model at D = 4096 (10 classes) with 1 and 2 threads, and transform to
#            its E = 1024 PCA features, next to pyarrow's read of the same file and
#            scikit-learn's PolynomialCountSketch + RidgeClassifier predict at the same D
#            (scripts/score_ref.py)
#   huge     train at D = 65,536 (tensor sketch, f32 Gram, fixed λ) on the 60k file:
#            the 16 GiB triangle, checkpointed and factored in place (about an hour)
#
# DIMS, SOLVE_DIMS and ROWS_LARGE change the sizes. Data goes to bench-data/. The numpy
# and scipy references run in PYTHON (default: the test venv, target/py-venv; skipped
# when it lacks them).
set -euo pipefail
cd "$(dirname "$0")/.."
sections=${SECTIONS:-"hot pass large solve score"}  # "huge" runs only when named
dims=${DIMS:-"2048 4096 8192"}
solve_dims=${SOLVE_DIMS:-"2048 4096 8192 16384"}
large=${ROWS_LARGE:-1000000}
mkdir -p bench-data

cargo build --release --examples --bins
bin=./target/release/sketchfit
gen=./target/release/examples/gen_data
gemm=./target/release/examples/gemm_ref

has() { [[ " $sections " == *" $1 "* ]]; }

py=${PYTHON:-target/py-venv/bin/python}
reference() { # blas_ref.py arguments…: skipped without numpy/scipy
  if "$py" -c "import numpy, scipy" 2>/dev/null; then
    "$py" scripts/blas_ref.py "$@"
  else
    echo "(reference skipped: $py has no numpy/scipy; run scripts/test.sh once or set PYTHON)"
  fi
}

pipeline() { # file dim lambda [extra lines]
  cat > "bench-data/$1" <<TOML
[data]
train = ["$2"]
features = ["px*"]
label = "label"
[[stages]]
kind = "tensor_sketch"
degree = 3
offset = 1.0
dim = $3
normalize = "l2"
[ridge]
lambda = $4
TOML
}

timed() { # label, command…: wall and peak RSS from GNU time, the run's own lines
  local label=$1; shift
  /usr/bin/time -f "$label: wall %e s, user %U s, peak RSS %M KiB" "$@" 2>&1 |
    grep -E "^(pass|solve|pca|memory|$label)" || true
}

if has hot; then
  echo "## cargo bench (one kernel at a time)"
  cargo bench --bench hotpaths
fi

if has pass || has solve; then
  [ -f bench-data/rows-60000.parquet ] || $gen 60000 bench-data/rows-60000.parquet 7500
fi
if has solve; then
  [ -f bench-data/val-10000.parquet ] || $gen 10000 bench-data/val-10000.parquet 5000
fi

if has pass; then
  for d in $dims; do
    for g in f64 f32; do
      echo
      echo "## pass, 60,000 × 784, D = $d, $g Gram"
      $gemm 60000 "$d" "$g"
      [ "$g" = f64 ] && reference gram 60000 "$d"
      pipeline "pass-$d.toml" rows-60000.parquet "$d" 0.01
      timed "train" $bin train "bench-data/pass-$d.toml" -o "bench-data/pass-$d.sfm" --set "run.gram=\"$g\""
    done
  done
fi

if has large; then
  f=bench-data/rows-$large.parquet
  [ -f "$f" ] || $gen "$large" "$f" 65536
  for n in 100000 "$large"; do
    g=bench-data/rows-$n.parquet
    [ -f "$g" ] || $gen "$n" "$g" 65536
    echo
    echo "## pass, $n × 784, D = 4096, f64 Gram (peak RSS must not grow with rows)"
    ./target/release/examples/decode_bench "$g"
    pipeline "large-$n.toml" "rows-$n.parquet" 4096 0.01
    timed "train" $bin train "bench-data/large-$n.toml" -o "bench-data/large-$n.sfm"
  done
fi

if has solve; then
  for d in $solve_dims; do
    echo
    echo "## solves at D = $d (statistics of 60,000 rows)"
    pipeline "solve-$d.toml" rows-60000.parquet "$d" 0.01
    stats=bench-data/solve-$d.stats
    [ -f "$stats" ] || $bin accumulate "bench-data/solve-$d.toml" --shard 0/1 -o "$stats" --quiet \
      --set 'run.gram="f32"'
    solve() { # label, --set arguments…
      local label=$1; shift
      timed "$label" $bin solve "bench-data/solve-$d.toml" "$stats" -o "bench-data/solve-$d.sfm" "$@"
    }
    e=$((d / 16))
    reference factor "$d"
    solve "cholesky, fixed λ" --set 'ridge.solver="cholesky"'
    solve "cholesky_f32, fixed λ" --set 'ridge.solver="cholesky_f32"'
    solve "tridiagonal, GCV" --set 'ridge.lambda="gcv"'
    sed 's/^train = \(.*\)/train = \1\nvalidation = ["val-10000.parquet"]/' "bench-data/solve-$d.toml" \
      > "bench-data/val-$d.toml"
    timed "tridiagonal, λ by validation and refit" $bin solve "bench-data/val-$d.toml" "$stats" \
      -o "bench-data/val-$d.sfm" --set 'ridge.lambda="gcv"'
    if [ "$d" -le "${KRYLOV_MAX_D:-16384}" ]; then
      solve "top-$e PCA by block Krylov, GCV" --set 'ridge.lambda="gcv"' --set pca.components=$e \
        --set 'pca.method="subspace"'
    fi
    if [ "$d" -le "${DENSE_MAX_D:-8192}" ]; then
      solve "dense eigen, GCV" --set 'ridge.lambda="gcv"' --set 'ridge.solver="eigen"'
      solve "top-$e PCA, dense" --set 'ridge.lambda="gcv"' --set pca.components=$e --set 'pca.method="dense"'
    fi
  done
fi

if has score; then
  f=bench-data/rows-1200000.parquet
  [ -f bench-data/rows-60000.parquet ] || $gen 60000 bench-data/rows-60000.parquet 7500
  [ -f "$f" ] || $gen 1200000 "$f" 30000
  echo
  echo "## scoring 1,200,000 × 784 rows, D = 4096"
  pipeline score.toml rows-60000.parquet 4096 0.01
  $bin train bench-data/score.toml -o bench-data/score.sfm --quiet >/dev/null
  $bin train bench-data/score.toml -o bench-data/score-pca.sfm --quiet --set pca.components=1024 >/dev/null
  for t in 1 2; do
    timed "predict with $t threads" $bin predict bench-data/score.sfm -i "$f" -o bench-data/score-out.parquet \
      --threads "$t"
    rm -f bench-data/score-out.parquet
  done
  timed "transform to 1024 PCA features" $bin transform bench-data/score-pca.sfm -i "$f" \
    -o bench-data/score-out.parquet
  rm -f bench-data/score-out.parquet
  if "$py" -c "import numpy, pyarrow, sklearn" 2>/dev/null; then
    "$py" scripts/score_ref.py "$f" 4096 bench-data/rows-60000.parquet
  else
    echo "(reference skipped: $py has no numpy/pyarrow/scikit-learn)"
  fi
fi

if has huge; then
  [ -f bench-data/rows-60000.parquet ] || $gen 60000 bench-data/rows-60000.parquet 7500
  echo
  echo "## train at D = 65,536, f32 Gram, fixed λ (statistics 16 GiB, factored in place)"
  pipeline huge.toml rows-60000.parquet 65536 0.01
  /usr/bin/time -f "train: wall %e s, user %U s, peak RSS %M KiB" \
    $bin train bench-data/huge.toml -o bench-data/huge.sfm --set 'run.gram="f32"' 2>&1 | tail -n 12
fi

#!/usr/bin/env bash
# Benchmarks (not tests): the training pass and the solves, each next to its reference
# measured in the same run. Every figure in docs/src/benchmarks.md comes from
# one of the sections below; run a section alone with SECTIONS="pass solve".
#
#   hot      cargo bench: tile GEMMs, maps, FWHT (one kernel at a time)
#   pass     train on 60,000 × 784 f32 (7,500-row row groups, 10 classes), tensor sketch
#            p = 3 on L2-normalised rows, fixed λ, at D = 2048 / 4096 / 8192 in f64 and
#            f32, with the pass's time split, next to a plain full GEMM ZᵀZ of the same
#            total shape on all cores (examples/gemm_ref) and numpy's z.T @ z (SYRK) of the
#            same shape on precomputed features (scripts/blas_ref.py)
#   gram     the pass against OpenBLAS side by side, D = 4096 and 16384 (GRAM_DIMS): OpenBLAS's
#            SYRK (scipy's BLAS) and numpy's z.T @ z of 60,000 × D precomputed features in
#            f64 and f32 (numpy's in a child process: its OpenBLAS 0.3.31 crashed on the
#            f64 product at D = 16384 on an AVX-512 Xeon, as did scipy's), the pass
#            in f64 and with run.gram = "f32", and the tile products alone on one core,
#            faer (examples/tile_ref) against OpenBLAS (blas_ref.py tiles)
#   large    the same pass on a 1M-row file (about 3 GB), for the flat-memory check
#   solve    statistics at D = 2048 … 16384 from the 60k file (accumulate), then every
#            solve path on them: cholesky and cholesky_f32 (fixed λ, next to scipy's
#            cho_factor of a D × D in f64 and f32), tridiagonal (GCV, and λ by a 10,000-row
#            validation file), eigen (dense, up to DENSE_MAX_D = 8192), and top-D/16 PCA
#            by block Krylov (up to KRYLOV_MAX_D = 16384) vs dense
#   score    predict of 1.2M × 784 f32 rows (row groups of 30,000) by a degree-3 tensor
#            sketch model at D = 4096 (10 classes) with 1 and 2 threads, and transform to
#            its E = 1024 PCA features, next to the Python Model.predict of the same rows
#            as one NumPy array (scripts/python_score.py), pyarrow's read of the same file
#            and scikit-learn's PolynomialCountSketch + RidgeClassifier predict at the same
#            D (scripts/score_ref.py)
#   remote   train (60k rows at D = 4096; one 266 MB object, and the same rows as 8 part
#            files of one row group each) and predict of 1.02M rows (34 part files) from
#            and to a local S3 server (moto_server on 127.0.0.1, in PYTHON's venv), each
#            next to the same command on local files, interleaved, twice; with the
#            server's own CPU time, which shares the machine's cores
#   spill    train at D = 16384 and 32768 (SPILL, "D:MiB" pairs) under a memory limit that
#            leaves no room for the f32 factor beside the statistics: cholesky_f32 with the
#            factor in the Gram's own memory (the Gram read back from the checkpoint) next
#            to the f64 factor in place at the same limit, back to back
#   nightly  ten daily files of 60,000 × 784 rows (seeds 1…10, 7,500-row row groups), the
#            pass's tensor sketch at D = 4096, fixed λ: fit-maps on day 1, one part per day
#            (accumulate --maps), a night (day 10's part, then solve over the ten parts)
#            next to train on all ten days with the same maps; the two models' weights
#            compared (python3, numpy, safetensors from PYTHON's venv)
#   huge     train at D = 65,536 (tensor sketch, f32 Gram, fixed λ) on the 60k file:
#            the 16 GiB triangle, checkpointed, the f32 factor in the Gram's own memory
#            (about 30 minutes on the 2-core Xeon)
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
    # OpenBLAS's own choice of kernel for this CPU, not one forced by the environment.
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$py" scripts/blas_ref.py "$@"
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

if has pass || has solve || has gram; then
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

if has gram; then
  for d in ${GRAM_DIMS:-4096 16384}; do
    echo
    echo "## the pass next to OpenBLAS, 60,000 × 784, D = $d"
    reference gram 60000 "$d"
    pipeline "gram-$d.toml" rows-60000.parquet "$d" 0.01
    for g in f64 f32; do
      timed "train, $g Gram" $bin train "bench-data/gram-$d.toml" -o "bench-data/gram-$d.sfm" \
        --set "run.gram=\"$g\""
      ./target/release/examples/tile_ref 2048 "$d" "$g"
    done
    reference tiles 2048 "$d"
    rm -f "bench-data/gram-$d.sfm"
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
  if "$py" -c "import sketchfit, numpy, pyarrow" 2>/dev/null; then
    "$py" scripts/python_score.py "$f" bench-data/score.sfm
  fi
  if "$py" -c "import numpy, pyarrow, sklearn" 2>/dev/null; then
    "$py" scripts/score_ref.py "$f" 4096 bench-data/rows-60000.parquet
  else
    echo "(reference skipped: $py has no numpy/pyarrow/scikit-learn)"
  fi
fi

if has remote; then
  [ -f bench-data/rows-60000.parquet ] || $gen 60000 bench-data/rows-60000.parquet 7500
  [ -f bench-data/rows-1200000.parquet ] || $gen 1200000 bench-data/rows-1200000.parquet 30000
  echo
  echo "## object store (moto_server on 127.0.0.1) next to local files"
  if [ ! -f bench-data/score.sfm ]; then
    pipeline score.toml rows-60000.parquet 4096 0.01
    $bin train bench-data/score.toml -o bench-data/score.sfm --quiet >/dev/null
  fi
  "$py" - <<'PY'
import pyarrow.parquet as pq, os
for src, out, n in [("bench-data/rows-60000.parquet", "bench-data/parts60k", 8),
                    ("bench-data/rows-1200000.parquet", "bench-data/parts1m", 34)]:
    os.makedirs(out, exist_ok=True)
    f = pq.ParquetFile(src)
    for i in range(n):
        p = f"{out}/part-{i:04d}.parquet"
        if not os.path.exists(p):
            pq.write_table(f.read_row_group(i), p + ".tmp", compression="none")
            os.rename(p + ".tmp", p)
PY
  port=${MOTO_PORT:-5099}
  export AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1 \
    AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_ALLOW_HTTP=true
  "$(dirname "$py")/moto_server" -H 127.0.0.1 -p "$port" >bench-data/moto.log 2>&1 &
  moto=$!
  trap 'kill $moto 2>/dev/null || true' EXIT
  "$py" - <<'PY'
import boto3, glob, os, time
s = boto3.client("s3")
for _ in range(50):
    try:
        s.create_bucket(Bucket="bench"); break
    except Exception:
        time.sleep(0.2)
s.upload_file("bench-data/rows-60000.parquet", "bench", "rows-60000.parquet")
s.upload_file("bench-data/score.sfm", "bench", "score.sfm")
for f in sorted(glob.glob("bench-data/parts60k/*.parquet") + glob.glob("bench-data/parts1m/*.parquet")):
    s.upload_file(f, "bench", f.removeprefix("bench-data/"))
PY
  cpu() { awk '{print $14 + $15}' "/proc/$moto/stat"; }
  server() { # label, command…: the command, then the server's CPU seconds during it
    local before; before=$(cpu)
    timed "$@"
    echo "  (moto_server CPU during it: $(awk -v a="$before" -v b="$(cpu)" 'BEGIN { print (b - a) / 100 }') s)"
  }
  pipeline remote-local.toml rows-60000.parquet 4096 0.01
  pipeline remote-s3.toml s3://bench/rows-60000.parquet 4096 0.01
  pipeline remote-parts-local.toml "parts60k/part-*.parquet" 4096 0.01
  pipeline remote-parts-s3.toml "s3://bench/parts60k/part-*.parquet" 4096 0.01
  for r in 1 2; do
    timed "train, local file" $bin train bench-data/remote-local.toml -o bench-data/remote-l.sfm
    server "train, s3:// object" $bin train bench-data/remote-s3.toml -o bench-data/remote-s.sfm
    timed "train, 8 local part files" $bin train bench-data/remote-parts-local.toml -o bench-data/remote-pl.sfm
    server "train, 8 s3:// part files" $bin train bench-data/remote-parts-s3.toml -o bench-data/remote-ps.sfm
    timed "predict 1.02M rows, local" $bin predict bench-data/score.sfm -i 'bench-data/parts1m/part-*.parquet' \
      -o bench-data/remote-pred.parquet
    server "predict 1.02M rows, s3:// to s3://" $bin predict s3://bench/score.sfm \
      -i 's3://bench/parts1m/part-*.parquet' -o "s3://bench/out/pred-$r.parquet"
    rm -f bench-data/remote-*.sfm bench-data/remote-pred.parquet
  done
  kill $moto
fi

if has spill; then
  [ -f bench-data/rows-60000.parquet ] || $gen 60000 bench-data/rows-60000.parquet 7500
  # The limits leave the statistics and chunk buffers of these shapes room for the spilled
  # solve's tile row and buffers, not for the f32 factor beside them (docs/src/benchmarks.md).
  for pair in ${SPILL:-16384:1700 32768:5000}; do
    d=${pair%%:*}
    limit=${pair##*:}
    echo
    echo "## fixed-λ solve at D = $d with run.memory_limit_mib = $limit: spilled f32 factor, f64 in place"
    pipeline "spill-$d.toml" rows-60000.parquet "$d" 0.01
    for solver in cholesky_f32 cholesky; do
      timed "train, $solver" $bin train "bench-data/spill-$d.toml" -o "bench-data/spill-$d.sfm" \
        --set 'run.gram="f32"' --set "run.memory_limit_mib=$limit" --set "ridge.solver=\"$solver\""
      rm -f "bench-data/spill-$d.sfm"
    done
  done
fi

if has nightly; then
  days=""
  for i in $(seq 1 10); do
    [ -f "bench-data/day-$i.parquet" ] || $gen 60000 "bench-data/day-$i.parquet" 7500 "$i"
    days="$days bench-data/day-$i.parquet"
  done
  pipeline nightly.toml day-1.parquet 4096 0.01
  echo
  echo "## nightly retraining, 10 days × 60,000 rows, D = 4096"
  rm -f bench-data/nightly.maps bench-data/day-*.sfs bench-data/nightly-*.sfm
  $bin fit-maps bench-data/nightly.toml -o bench-data/nightly.maps -q
  for i in $(seq 1 9); do
    $bin accumulate bench-data/nightly.toml --maps bench-data/nightly.maps -i "bench-data/day-$i.parquet" \
      -o "bench-data/day-$i.sfs" -q >/dev/null
  done
  timed "night: accumulate day 10" $bin accumulate bench-data/nightly.toml --maps bench-data/nightly.maps \
    -i bench-data/day-10.parquet -o bench-data/day-10.sfs -q
  timed "night: solve over 10 parts" $bin solve bench-data/nightly.toml bench-data/day-*.sfs \
    --maps bench-data/nightly.maps -o bench-data/nightly-parts.sfm -q
  list=$(printf '"%s",' $days)
  timed "retrain on all 10 days" $bin train bench-data/nightly.toml --maps bench-data/nightly.maps \
    --set "data.train=[${list%,}]" -o bench-data/nightly-all.sfm -q
  "$py" - <<'PY'
import numpy as np
from safetensors.numpy import load_file
a = load_file("bench-data/nightly-parts.sfm")["weights"]
b = load_file("bench-data/nightly-all.sfm")["weights"]
print(f"weights, ten parts against one run: max relative difference {np.max(np.abs(a - b)) / np.max(np.abs(b)):.2e}")
PY
fi

if has huge; then
  [ -f bench-data/rows-60000.parquet ] || $gen 60000 bench-data/rows-60000.parquet 7500
  echo
  echo "## train at D = 65,536, f32 Gram, fixed λ (statistics 16 GiB, factored in their own memory)"
  pipeline huge.toml rows-60000.parquet 65536 0.01
  /usr/bin/time -f "train: wall %e s, user %U s, peak RSS %M KiB" \
    $bin train bench-data/huge.toml -o bench-data/huge.sfm --set 'run.gram="f32"' 2>&1 | tail -n 12
fi

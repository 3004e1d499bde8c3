#!/usr/bin/env bash
# Benchmarks (not tests): hot paths, Parquet decode, whole training and peak RSS.
# Generates bench-data/{100k,1m}.parquet (784 f32 columns) on first use (~3 GB).
# ROWS_SMALL / ROWS_LARGE change the sizes; SKIP_LARGE=1 runs only the small file.
set -euo pipefail
cd "$(dirname "$0")/.."
small=${ROWS_SMALL:-100000}
large=${ROWS_LARGE:-1000000}
mkdir -p bench-data

cargo build --release --examples --bins
echo "## cargo bench (Gram update vs GEMM, tensor sketch)"
cargo bench --bench hotpaths

sizes=("$small")
[ "${SKIP_LARGE:-0}" = 1 ] || sizes+=("$large")
for n in "${sizes[@]}"; do
  f=bench-data/rows-$n.parquet
  [ -f "$f" ] || ./target/release/examples/gen_data "$n" "$f"
  echo
  echo "## $n rows × 784: decode"
  ./target/release/examples/decode_bench "$f"
  cat > bench-data/bench.toml <<TOML
[data]
train = ["rows-$n.parquet"]
features = ["px*"]
label = "label"
[[stages]]
kind = "tensor_sketch"
degree = 2
offset = 1.0
dim = 4096
normalize = "l2"
[pca]
components = 1024
TOML
  echo "## $n rows × 784: whole training at D = 4096 (rows/s and peak RSS on stderr)"
  start=$(date +%s.%N)
  ./target/release/sketchfit train bench-data/bench.toml -o bench-data/bench.sfm
  end=$(date +%s.%N)
  awk -v n="$n" -v s="$start" -v e="$end" 'BEGIN { printf "training: %.0f rows/s (%.1f s)\n", n / (e - s), e - s }'
done

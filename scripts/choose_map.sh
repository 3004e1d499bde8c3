#!/usr/bin/env bash
# The digits row of docs/src/guide/choosing-a-map.md: every map family trained on the
# shipped digits at the same width, λ by GCV, no PCA; test accuracy, `train` wall and
# peak RSS as a Markdown table. BIN (default target/debug/sketchfit, the optimised dev
# profile, built if missing) and DIM (default 1024: the landmark map needs as many rows)
# set the run. A run that fails prints its error in the row.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-target/debug/sketchfit}
[ -x "$bin" ] || cargo build --quiet --bin sketchfit
dim=${DIM:-1024}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| map | D | test accuracy | \`train\` wall | peak RSS |"
echo "|---|---|---|---|---|"
while IFS='|' read -r name stage; do
  cat >"$tmp/p.toml" <<TOML
task = "classification"
[data]
train = ["$PWD/data/digits_train.parquet"]
test = ["$PWD/data/digits_test.parquet"]
features = ["px*"]
label = "label"
[[stages]]
$(printf '%b' "$stage")
[ridge]
lambda = "gcv"
[run]
seed = 7
TOML
  start=$(date +%s.%N)
  if ! out=$("$bin" train "$tmp/p.toml" -o "$tmp/m.sfm" 2>"$tmp/err"); then
    printf '| %s | %s | failed: %s | | |\n' "$name" "$dim" "$(grep '^error' "$tmp/err" | head -1)"
    continue
  fi
  end=$(date +%s.%N)
  rm -f "$tmp/m.sfm"
  acc=$(sed -n 's/^test accuracy: \([0-9.]*\).*/\1/p' <<<"$out")
  rss=$(sed -n 's/^peak memory (RSS): \(.*\)$/\1/p' "$tmp/err")
  printf '| %s | %s | %.2f %% | %.1f s | %s |\n' "$name" "$dim" "$(awk -v a="$acc" 'BEGIN{print 100*a}')" \
    "$(awk -v s="$start" -v e="$end" 'BEGIN{print e-s}')" "$rss"
done <<MAPS
\`nystrom\`, \`(⟨x,y⟩+1)^3\` on unit rows|kind = "nystrom"\ndegree = 3\noffset = 1.0\nnormalize = "l2"\ndim = $dim
\`nystrom\`, Gaussian, σ by the median|kind = "nystrom"\nkernel = "gaussian"\ndim = $dim
\`tensor_sketch\`, p = 3|kind = "tensor_sketch"\ndegree = 3\noffset = 1.0\nnormalize = "l2"\ndim = $dim
\`craftmaps\`, p = 3|kind = "craftmaps"\nup = "tensor_sketch"\ndegree = 3\noffset = 1.0\nnormalize = "l2"\ndim = $dim
\`random_maclaurin\`, p = 3, H0/1, Hadamard|kind = "random_maclaurin"\ndegree = 3\noffset = 1.0\nnormalize = "l2"\nh01 = true\nhadamard = true\ndim = $dim
\`recursive_tensor_sketch\`, p = 3|kind = "recursive_tensor_sketch"\ndegree = 3\noffset = 1.0\nnormalize = "l2"\ndim = $dim
\`rff\`, Gaussian, σ by the median|kind = "rff"\ndim = $dim
\`exp_chi2\`|kind = "exp_chi2"\ndim = $dim
\`chi2\` (deterministic, N = 3 terms a column)|kind = "chi2"
\`identity\` (linear)|kind = "identity"
MAPS

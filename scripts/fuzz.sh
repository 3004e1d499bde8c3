#!/usr/bin/env bash
# The property test of tests/suite/property.rs at scale: random pipelines over random small
# Parquet schemas and values; every run must exit 0 or 2, never panic, and every model
# it writes must load. CASES (default 3000) and SEED (default: the date) set the run.
set -euo pipefail
cd "$(dirname "$0")/.."
cases=${CASES:-3000}
seed=${SEED:-$(date +%Y%m%d)}
echo "fuzz: $cases cases, seed $seed"
SKETCHFIT_FUZZ_CASES=$cases SKETCHFIT_FUZZ_SEED=$seed \
  cargo test --test suite property::random_pipelines_and_schemas -- --nocapture

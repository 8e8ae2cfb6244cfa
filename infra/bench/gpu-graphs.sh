#!/usr/bin/env bash
# CUDA graphs (train.compile_mode=reduce-overhead) on one GPU: do its warm starts work? One call
# (about 7 minutes):
#   test         tests/train/test_cuda_graphs.py (graph replay trains as the compiled step)
#   cold-data    cold, --data dataset (real JPEG input), folder D gets the compile-cache blob
#   warm-memory  warm from D's blob, --data memory
#   warm-data    warm from D's blob, --data dataset
#   dir-only     a new checkpoint folder (no blob), the cold launch's local compiler caches kept:
#                tells a failing blob from a failing warm start
# Every launch's stderr is kept; everything comes back as one archive, OUTDIR/graphs.tgz.
#   usage: infra/bench/gpu-graphs.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
. infra/bench/machine.sh
bench_start graphs "${1:-}"

jpeg_set "$results/dataset.log"
timeout 120 python -m pytest -q -p no:cacheprovider tests/train/test_cuda_graphs.py \
  >"$results/test.txt" 2>&1

variant() {  # variant NAME SECONDS KEEP_DIR_OR_EMPTY [bench train arguments ...]
  local name=$1 limit=$2 keep=$3; shift 3
  local started=$SECONDS
  KEEP_COMPILER_CACHE=$keep PYTHONPATH=$PWD/infra/bench/autotune_trace:$PWD timeout "$limit" \
    python -m ffjobs.cli bench train --config train-256 --json --warmup 15 --steps 40 \
    --set train.compile_mode=reduce-overhead "$@" \
    >"$results/$name.json" 2>"$results/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s" | tee -a "$results/times.txt"
  tar czf "$out/graphs.tgz" -C "$work" graphs  # after each launch: a call cut short keeps them
}

local_cache="$work/local-cache"
variant cold-data 200 "$local_cache" --data dataset --no-peak --no-checkpoint \
  --checkpoint-dir "$work/run-a"
variant warm-memory 75 "" --data memory --no-peak --no-checkpoint --checkpoint-dir "$work/run-a"
variant warm-data 75 "" --data dataset --no-peak --no-checkpoint --checkpoint-dir "$work/run-a"
variant dir-only 75 "$local_cache" --data memory --no-peak --no-checkpoint \
  --checkpoint-dir "$work/run-b"
tail -3 "$results/test.txt"
for name in cold-data warm-memory warm-data dir-only; do
  python -c "import json, sys; print(sys.argv[1], json.load(open(sys.argv[2])).get('summary'))" \
    "$name" "$results/$name.json" 2>/dev/null || { echo "$name: no result"; tail -5 "$results/$name.log"; }
done

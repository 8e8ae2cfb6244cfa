#!/usr/bin/env bash
# Where the one-GPU training step's time goes: the train-256 preset profiled (torch.profiler,
# kernel table by self device time, named phases, trace) compiled cold, compiled warm (compile
# cache in the run's checkpoint folder: start-up breakdown) and eager bf16.
#   usage: dev/gpu-step/gpu-profile.sh OUTDIR   (writes OUTDIR/profiles.tgz and *.json)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu-profile.sh OUTDIR}
work=$(mktemp -d)
mkdir -p "$out"
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
. infra/bench/machine.sh
machine_facts "$out/machine.txt"

variant() {  # variant NAME SECONDS [bench train arguments ...]
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  timeout "$limit" python -m ffjobs.cli bench train --config train-256 --json \
    --no-checkpoint --profile "$work/$name" "$@" >"$out/$name.json" 2>"$work/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s"
}

variant preset-cold 200 --data memory --warmup 15 --steps 30 --checkpoint-dir "$work/run-a"
variant preset-warm 100 --data memory --warmup 5 --steps 10 --no-peak --checkpoint-dir "$work/run-a"
variant eager 100 --data memory --warmup 5 --steps 10 --no-peak --set train.compile=false

tar czf "$out/profiles.tgz" -C "$work" --exclude='run-a' .
for name in preset-cold preset-warm eager; do
  echo "=== $name"
  python - "$out/$name.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as exc:
    print("no result:", exc); sys.exit()
keys = ("images_per_s", "step_time_s", "data_wait_fraction", "mfu_vs_measured_peak",
        "first_step_s", "trainer_init_s", "compile_cache_loaded_entries", "profile_step_s",
        "profile_device_busy_fraction", "profile_kernel_share", "max_memory_gib")
print({k: r.get(k) for k in keys})
PY
  cat "$work/$name/ranges.txt" 2>/dev/null
done
head -30 "$work/preset-cold/kernels.txt"
cat "$work/preset-warm/compile-times.txt"

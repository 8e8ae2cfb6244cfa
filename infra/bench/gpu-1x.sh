#!/usr/bin/env bash
# The one-GPU figures of docs/benchmarks.md in one call: the train-256 preset and the plain path
# side by side (--baseline plain, profiled), the compile cache cold and warm (same
# --checkpoint-dir twice), checkpoint cost, in-memory and dataset input, and optionally the
# same preset from another checkout (before/after a change, same call).
#   usage: infra/bench/gpu-1x.sh OUTDIR [OTHER_CHECKOUT]
#   PROFILE_COLD=1: also profile the cold preset run; THIN_CONV=1: also run thin_conv.py
#   (writes OUTDIR/*.json, OUTDIR/profiles.tgz and logs.tgz, prints a table)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu-1x.sh OUTDIR [OTHER_CHECKOUT]}
other=${2:-}
work=$(mktemp -d)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
. infra/bench/machine.sh
machine_facts "$out/machine.txt"

variant() {  # variant NAME SECONDS CHECKOUT [bench train arguments ...]
  local name=$1 limit=$2 tree=$3; shift 3
  local started=$SECONDS
  (cd "$tree" && PYTHONPATH=$PWD timeout "$limit" python -m ffjobs.cli bench train \
    --config train-256 --json "$@") >"$out/$name.json" 2>"$work/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s"
}

here=$PWD
variant memory-cold 240 "$here" --warmup 15 --steps 40 --data memory --baseline plain \
  --checkpoint-dir "$work/run-a" ${PROFILE_COLD:+--profile "$work/profile"}
variant memory-warm 90 "$here" --warmup 15 --steps 40 --data memory --no-checkpoint \
  --no-peak --checkpoint-dir "$work/run-a" --profile "$work/profile-warm" --profile-steps 3
variant dataset-warm 150 "$here" --warmup 15 --steps 40 --data dataset \
  --checkpoint-dir "$work/run-a"
if [ -n "$other" ]; then
  variant other-memory-cold 150 "$other" --warmup 15 --steps 40 --data memory --no-checkpoint
fi
if [ -n "${THIN_CONV:-}" ]; then timeout 90 python infra/bench/thin_conv.py >"$out/thin-conv.txt" 2>&1; fi

tar czf "$out/profiles.tgz" -C "$work" $(cd "$work" && ls -d profile* 2>/dev/null)
tar czf "$out/logs.tgz" -C "$work" --exclude='run-a' --exclude='profile*' .
python - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
keys = ("images_per_s", "step_time_s", "data_wait_fraction", "mfu_vs_measured_peak",
        "measured_peak_flops", "first_step_s", "trainer_init_s", "compile_cache_loaded_entries",
        "checkpoint_sync_blocked_s",
        "checkpoint_async_first_blocked_s", "checkpoint_async_blocked_s",
        "checkpoint_async_write_s", "step_time_during_write_s", "checkpoint_blocked_fraction",
        "checkpoint_bytes", "flops_per_image", "max_memory_gib", "profile_step_s",
        "profile_kernel_share")
def short(r):
    return {k: (round(r[k], 4) if isinstance(r[k], float) else r[k]) for k in keys if k in r}
print((out / "machine.txt").read_text())
for path in sorted(out.glob("*.json")):
    try:
        r = json.loads(path.read_text())
    except Exception as exc:
        print(path.stem, "no result:", exc)
        continue
    print(path.stem, short(r))
    if "baseline" in r:
        print(path.stem, "plain", short(r["baseline"]))
    print(path.stem, r.get("summary"))
PY
cat "$out/thin-conv.txt" 2>/dev/null
sort -k2 -n -r "$work/profile-warm/compile-times.txt" 2>/dev/null | head -25

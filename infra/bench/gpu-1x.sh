#!/usr/bin/env bash
# The one-GPU figures of docs/benchmarks.md in one call: the train-256 preset and the plain path
# side by side (--baseline plain) with in-memory and dataset input, the compile cache cold and
# warm (same --checkpoint-dir twice), and synchronous vs asynchronous checkpoint cost.
#   usage: infra/bench/gpu-1x.sh OUTDIR   (writes OUTDIR/*.json and logs.tgz, prints a table)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu-1x.sh OUTDIR}
work=$(mktemp -d)
mkdir -p "$out"
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; nvidia-smi -L
  python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
} >"$out/machine.txt" 2>&1

variant() {  # variant NAME SECONDS [bench train arguments ...]
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  timeout "$limit" python -m ffjobs.cli bench train --config train-256 --warmup 15 --steps 40 \
    --json "$@" >"$out/$name.json" 2>"$work/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s"
}

variant memory-cold 300 --data memory --baseline plain --checkpoint-dir "$work/run-a"
variant memory-warm 150 --data memory --no-checkpoint --checkpoint-dir "$work/run-a"
variant dataset-warm 240 --data dataset --baseline plain --checkpoint-dir "$work/run-a"

tar czf "$out/logs.tgz" -C "$work" --exclude='run-a' .
python - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
keys = ("images_per_s", "step_time_s", "data_wait_fraction", "mfu_vs_measured_peak",
        "first_step_s", "compile_cache_loaded_entries", "checkpoint_sync_blocked_s",
        "checkpoint_async_blocked_s", "checkpoint_async_write_s", "step_time_during_write_s",
        "checkpoint_blocked_fraction", "checkpoint_bytes", "flops_per_image", "max_memory_gib")
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

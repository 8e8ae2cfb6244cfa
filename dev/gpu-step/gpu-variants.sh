#!/usr/bin/env bash
# Precision and torch.compile variants of the training benchmark, side by side in one call on
# one host with 2 GPUs (preset train-256, random tensors as input, no all-reduce A/B re-run):
# bf16 eager, bf16 + torch.compile and fp16 on 1 GPU; bf16 eager and bf16 + compile on 2.
#   usage: dev/gpu-step/gpu-variants.sh OUTDIR   (writes OUTDIR/variants.tgz, prints a summary)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu-variants.sh OUTDIR}
work=$(mktemp -d)/gpu-variants
mkdir -p "$work" "$out"
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

variant() {  # variant NAME NPROC SECONDS [--set KEY=VALUE ...]
  local name=$1 n=$2 limit=$3; shift 3
  local started=$SECONDS
  timeout "$limit" python -m ffjobs.cli bench train --config train-256 --nproc "$n" \
    --warmup 15 --steps 40 --no-comm-ab --json "$@" >"$work/$name.json" 2>"$work/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s"
}

variant bf16-1gpu 1 120
variant bf16-compile-1gpu 1 240 --set train.compile=true
variant fp16-1gpu 1 120 --set train.precision=fp16
variant bf16-2gpu 2 120
variant bf16-compile-2gpu 2 240 --set train.compile=true

python - "$work" <<'PY'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
keys = ("images_per_s", "images_per_s_per_gpu", "step_time_s", "mfu_vs_measured_peak",
        "exposed_comm_fraction", "error")
for path in sorted(work.glob("*.json")):
    try:
        result = json.loads(path.read_text())
    except Exception as exc:
        print(path.stem, "no result:", exc, (work / f"{path.stem}.log").read_text()[-600:])
        continue
    print(path.stem, {k: result.get(k) for k in keys if k in result})
PY
tar czf "$out/variants.tgz" -C "$(dirname "$work")" gpu-variants

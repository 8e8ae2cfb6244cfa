#!/usr/bin/env bash
# The preset's numerics against bf16 eager and fp32, with the start-up figures a change to the
# random identity encoder's values could move, in one call (under 10 minutes):
#   calibrate     seconds calibrate_batchnorm adds to building the train-256 models (CPU)
#   cold          --data dataset, folder D gets the compile cache; warm: --data memory from D
#   grads         grad_agreement.py --steps 10: gradients at the same weights and batch
#   loss          ffjobs bench numerics --steps 200 --seeds 3: loss levels over seeds (Welch's t)
# Writes OUTDIR/numerics.tgz, remade after each step so that a call cut short keeps what finished
# (numerics/: machine.txt, NAME.out: stdout, NAME.log: stderr, times.txt, grads.json, loss.json);
# loss gets the call's remaining time and loss.json keeps the launches that finished.
#   usage: dev/numerics/gpu-numerics.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
. infra/bench/machine.sh
bench_start numerics "${1:-}"

jpeg_set "$results/dataset.log"

step() {  # step NAME SECONDS COMMAND ...: stdout to NAME.out, stderr to NAME.log
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  PYTHONPATH=$PWD timeout "$limit" "$@" >"$results/$name.out" 2>"$results/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s" | tee -a "$results/times.txt"
  tar czf "$out/numerics.tgz" -C "$work" numerics
}

step calibrate 60 python -c "
import json, time
from ffjobs.config import load_config, resolve_preset
from ffjobs.models.identity import build_identity_backbone, calibrate_batchnorm
import torch
cfg = load_config(resolve_preset('train-256')).model
backbone = build_identity_backbone(cfg)
started = time.perf_counter()
calibrate_batchnorm(backbone, cfg.identity_input_size)
print(json.dumps({'calibrate_s': time.perf_counter() - started, 'threads': torch.get_num_threads()}))"
bench=(python -m ffjobs.cli bench train --config train-256 --json --warmup 15 --steps 40)
step cold 200 "${bench[@]}" --data dataset --no-peak --checkpoint-dir "$work/D"
step warm 75 "${bench[@]}" --data memory --no-peak --no-checkpoint --checkpoint-dir "$work/D"
step grads 150 python dev/numerics/grad_agreement.py --config train-256 --steps 10 \
  --out "$results/grads.json"
left=$((570 - SECONDS))  # what the call has left; under a minute, no loss curve is worth starting
if [ "$left" -ge 60 ]; then
  step loss "$left" python -m ffjobs.cli bench numerics --config train-256 --steps 200 --seeds 3 \
    --out "$results/loss.json"
else
  echo "loss: skipped, $left s left" | tee -a "$results/times.txt"
fi
for name in calibrate cold warm; do
  python - "$results/$name.out" <<'PY'
import json, sys
try:
    r = json.loads(open(sys.argv[1]).read())
except Exception as exc:
    print(sys.argv[1], "no result:", exc)
    raise SystemExit
print(sys.argv[1], r.get("summary", r))
PY
done
tail -n 20 "$results/grads.log" "$results/loss.log"

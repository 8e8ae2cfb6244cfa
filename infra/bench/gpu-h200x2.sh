#!/usr/bin/env bash
# The two-GPU figures of docs/benchmarks.md (one host, 2 GPUs), in one go:
# preflight (default, P2P off, P2P+SHM off), the reference all-reduce loop, and the training
# benchmark on 1 and 2 GPUs. Needs only torch, numpy, pillow and pyyaml on the host.
#   usage: infra/bench/gpu-h200x2.sh OUTDIR        (writes OUTDIR/results.tgz and prints a summary)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu-h200x2.sh OUTDIR}
work=$(mktemp -d)/gpu-h200x2
mkdir -p "$work" "$out"
export PYTHONPATH=$PWD NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
TIMEFORMAT=%R

. infra/bench/machine.sh
machine_facts "$work/machine.txt" nvidia-smi topo -m

preflight() {  # preflight NAME [VAR=VALUE ...]
  local name=$1; shift
  { time timeout 180 env "$@" python -m ffjobs.preflight --local -c clusters/h200x2-nvlink \
      --json --set runs_dir="$work/runs-$name" --set tracking.enabled=false \
      >"$work/preflight-$name.json" 2>"$work/preflight-$name.err"; } 2>"$work/wall-$name.txt"
  echo "preflight $name: exit $? wall $(tail -1 "$work/wall-$name.txt") s"
}

preflight default
timeout 120 python -m ffjobs.bench.allreduce --sizes 1024,8192 --json \
  >"$work/reference-allreduce.json" 2>"$work/reference-allreduce.err"
preflight p2p-off NCCL_P2P_DISABLE=1
preflight socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1

for n in 1 2; do
  timeout 240 python -m ffjobs.cli bench train --config train-256 --nproc "$n" \
    --set model.identity_weights=null --warmup 10 --steps 30 --json >"$work/bench-train-${n}gpu.json" 2>"$work/bench-train-${n}gpu.log"
  echo "bench train ${n} GPU(s): exit $?"
done

python - "$work" <<'PY'
import json, pathlib, sys
work = pathlib.Path(sys.argv[1])
def load(name):
    try:
        return json.loads((work / name).read_text())
    except Exception as exc:
        return {"error": f"{name}: {exc}"}
ref = {round(r["size_bytes"] / 2**20): r["busbw_gbps"] for r in load("reference-allreduce.json").get("results", [])}
print("reference busbw GB/s:", ref)
for case in ("default", "p2p-off", "socket"):
    rep = load(f"preflight-{case}.json")
    sweep = {round(r["size_bytes"] / 2**20): r["busbw_gbps"] for r in rep.get("sweep", [])}
    ratios = {k: round(sweep[k] / ref[k], 3) for k in ref if k in sweep}
    print(case, rep.get("verdict"), "wall", (work / f"wall-{case}.txt").read_text().split()[-1:],
          "busbw", sweep, "vs ref", ratios, "|", (rep.get("reasons") or [""])[0][:200])
for n in (1, 2):
    r = load(f"bench-train-{n}gpu.json")
    keys = ("images_per_s", "images_per_s_per_gpu", "mfu_vs_measured_peak", "measured_peak_flops",
            "exposed_comm_fraction", "exposed_comm_fraction_ab", "step_time_s", "error")
    print(f"train {n} GPU:", {k: r.get(k) for k in keys if k in r})
PY
tar czf "$out/results.tgz" -C "$(dirname "$work")" gpu-h200x2

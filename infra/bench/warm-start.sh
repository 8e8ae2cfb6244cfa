#!/usr/bin/env bash
# What a warm start of the train-256 preset spends its time on, one GPU, one call:
#   cold      compile cache empty; the run's checkpoint folder D gets the compile-cache blob
#   warm-blob D again, empty local compiler caches (what a restart on another node sees today)
#   warm-dir  D again, and the cold run's whole local Inductor/Triton cache folder kept
#   dir-only  a new checkpoint folder (no blob), the cold run's local cache folder kept
# Each run records every Triton launch-configuration benchmark (autotune_trace/) and the warm
# ones profile one step (compile-times.txt: where start-up went).
#   usage: infra/bench/warm-start.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: warm-start.sh OUTDIR}
work=$(mktemp -d)
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
. infra/bench/machine.sh
machine_facts "$out/machine.txt"

run() {  # run NAME CHECKPOINT_DIR KEEP_DIR_OR_EMPTY [bench train arguments ...]
  local name=$1 ckpt=$2 keep=$3; shift 3
  local started=$SECONDS
  KEEP_COMPILER_CACHE=$keep AUTOTUNE_TRACE="$out/$name-autotune.jsonl" \
    PYTHONPATH=$PWD/infra/bench/autotune_trace:$PWD timeout 300 python -m ffjobs.cli bench train \
    --config train-256 --json --warmup 10 --steps 20 --data memory --no-checkpoint --no-peak \
    --checkpoint-dir "$ckpt" "$@" >"$out/$name.json" 2>"$out/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s"
}

run cold "$work/run-a" "$work/local-cache"
run warm-blob "$work/run-a" "" --profile "$work/profile-blob" --profile-steps 1
run warm-dir "$work/run-a" "$work/local-cache" --profile "$work/profile-dir" --profile-steps 1
run dir-only "$work/run-b" "$work/local-cache"
for p in blob dir; do cp "$work/profile-$p/compile-times.txt" "$out/compile-times-$p.txt" 2>/dev/null; done
python - "$out" <<'PY'
import json, pathlib, sys, collections
out = pathlib.Path(sys.argv[1])
print((out / "machine.txt").read_text())
for name in ("cold", "warm-blob", "warm-dir", "dir-only"):
    try:
        r = json.loads((out / f"{name}.json").read_text())
    except Exception as exc:
        print(name, "no result:", exc); continue
    trace = [json.loads(l) for l in (out / f"{name}-autotune.jsonl").read_text().splitlines()] \
        if (out / f"{name}-autotune.jsonl").exists() else []
    states = collections.Counter(t["cache"].get("autotune_cache_state", "?") for t in trace)
    print(name, {k: r.get(k) for k in ("images_per_s", "first_step_s", "trainer_init_s",
          "compile_cache_loaded_entries", "compile_cache_saved_entries")},
          "autotuned", len(trace), "kernels in", round(sum(t["seconds"] for t in trace), 1), "s",
          dict(states), "best_configs beside:",
          collections.Counter(t["best_configs_beside"] for t in trace).most_common(3))
PY
for p in blob dir; do echo "== compile times, warm-$p"; sort -k2 -n -r "$out/compile-times-$p.txt" 2>/dev/null | head -12; done

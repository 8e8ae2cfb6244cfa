#!/usr/bin/env bash
# Warm starts of two checkouts side by side in one call (about 8 minutes): this tree makes the
# cold launch's checkpoint folder D (compile-cache blob and region captures), then warm launches
# from D alternate between OTHER (an earlier checkout: `git archive REV | tar -x -C DIR`) and this
# tree, three each, --data memory. Both read the same D: the captures are keyed by torch, the
# networks' code and the settings, not by the code that loads them.
# Everything comes back as one archive, OUTDIR/ab.tgz, renewed after each launch.
#   usage: infra/bench/gpu-warm-ab.sh OUTDIR OTHER
set -uo pipefail
cd "$(dirname "$0")/../.."
other=$(cd "${2:?usage: $0 OUTDIR OTHER}" && pwd)
. infra/bench/machine.sh
bench_start ab "${1:-}"

launch() {  # launch NAME TREE SECONDS [bench train arguments ...]
  local name=$1 tree=$2 limit=$3; shift 3
  local started=$SECONDS
  (cd "$tree" && env COMPILE_TIMES="$results/$name.compile-times" \
    PYTHONPATH="$tree/infra/bench/autotune_trace:$tree" timeout "$limit" \
    python -m ffjobs.cli bench train --config train-256 --json --warmup 15 --steps 40 "$@" \
    >"$results/$name.json" 2>"$results/$name.log")
  echo "$name: exit $? in $((SECONDS - started)) s" | tee -a "$results/times.txt"
  tar czf "$out/ab.tgz" -C "$work" ab
}

launch cold "$PWD" 300 --data memory --no-peak --checkpoint-dir "$work/D"
for round in 1 2 3; do
  for side in other this; do
    tree=$PWD; [ "$side" = other ] && tree=$other
    launch "warm-$side-$round" "$tree" 75 --data memory --no-peak --no-checkpoint \
      --checkpoint-dir "$work/D"
  done
done
python - "$results" <<'PY'
import json, pathlib, sys
results = pathlib.Path(sys.argv[1])
for path in sorted(results.glob("*.json")):
    try:
        r = json.loads(path.read_text())
    except Exception as exc:
        print(path.stem, "no result:", exc)
        continue
    print(f"{path.stem}: first step {r['first_step_s']:.1f} s, trainer init "
          f"{r['trainer_init_s']:.2f} s, process start {r.get('process_start_s') or 0:.1f} s, "
          f"{r['images_per_s']:.1f} img/s")
    for line in (results / f"{path.stem}.log").read_text().splitlines():
        if line.startswith("first step") or "capture" in line and "warn" in line.lower():
            print("   ", line.strip()[:300])
PY

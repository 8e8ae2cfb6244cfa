#!/usr/bin/env bash
# Warm starts of two checkouts side by side in one call (about 8 minutes): OTHER (an earlier
# checkout: `git archive REV | tar -x -C DIR`) and this tree each make their own cold launch's
# checkpoint folder (compile-cache blob and region captures; their own, since the two may keep
# their local compiler caches under different roots, and the blob's kernels name that folder),
# then warm launches alternate between OTHER and this tree, three each, --data memory, each
# from its own folder. Short launches (--warmup 5 --steps 10): the first step is the figure.
# First, how fast the temporary folder and /dev/shm take small files (fs_probe.py).
# Everything comes back as one archive, OUTDIR/ab.tgz, renewed after each launch.
#   usage: dev/warm-start/gpu-warm-ab.sh OUTDIR OTHER
set -uo pipefail
cd "$(dirname "$0")/../.."
other=$(cd "${2:?usage: $0 OUTDIR OTHER}" && pwd)
. infra/bench/machine.sh
bench_start ab "${1:-}"
{ df -h /tmp /dev/shm; grep -E ' / | /tmp | /dev/shm ' /proc/mounts
  python dev/warm-start/fs_probe.py /tmp /dev/shm; } >"$results/filesystems.txt" 2>&1

launch() {  # launch NAME TREE SECONDS [bench train arguments ...]
  local name=$1 tree=$2 limit=$3; shift 3
  local started=$SECONDS
  (cd "$tree" && env COMPILE_TIMES="$results/$name.compile-times" \
    PYTHONPATH="$tree/infra/bench/autotune_trace:$tree" timeout "$limit" \
    python -m ffjobs.cli bench train --config train-256 --json --warmup 5 --steps 10 \
    --data memory --no-peak --no-checkpoint "$@" \
    >"$results/$name.json" 2>"$results/$name.log")
  echo "$name: exit $? in $((SECONDS - started)) s" | tee -a "$results/times.txt"
  tar czf "$out/ab.tgz" -C "$work" ab
}

launch cold-other "$other" 200 --checkpoint-dir "$work/D-other"
launch cold-this "$PWD" 200 --checkpoint-dir "$work/D-this"
for round in 1 2 3; do
  for side in other this; do
    tree=$PWD; [ "$side" = other ] && tree=$other
    launch "warm-$side-$round" "$tree" 75 --checkpoint-dir "$work/D-$side"
  done
done
cat "$results/filesystems.txt"
python - "$results" <<'PY'
import json, pathlib, re, sys
results = pathlib.Path(sys.argv[1])
for path in sorted(results.glob("*.json")):
    try:
        r = json.loads(path.read_text())
    except Exception as exc:
        print(path.stem, "no result:", exc)
        continue
    print(f"{path.stem}: first step {r['first_step_s']:.1f} s, trainer init "
          f"{r['trainer_init_s']:.2f} s, process start {r.get('process_start_s') or 0:.1f} s, "
          f"{r['images_per_s']:.1f} img/s, local caches {r.get('local_compiler_cache_mb', 0):.0f} MB "
          f"under {r.get('local_compiler_cache_root', '?')}")
    for times in sorted(results.glob(f"{path.stem}.compile-times.*")):  # the compiler's timers
        text = times.read_text()
        picked = re.findall(r"^(AOTAutogradCache.inductor_load|TritonBundler.read_and_emit|"
                            r"PyCodeCache.load_by_key_path|inductor_codecache_torch_key)\s+([\d.]+)",
                            text, re.M)
        if picked:
            print("    ", times.suffix[1:], ", ".join(f"{k} {v}" for k, v in picked))
    for line in (results / f"{path.stem}.log").read_text().splitlines():
        if line.startswith("first step") or "capture" in line and "warn" in line.lower():
            print("   ", line.strip()[:300])
PY

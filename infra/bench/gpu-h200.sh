#!/usr/bin/env bash
# The one-H200 figures of docs/benchmarks.md in one call (about 6 minutes): throughput, MFU and
# the plain path side by side, data wait, checkpoint cost, and warm starts; every launch records
# the Triton kernels it tunes (autotune_trace/) and where its compilation went:
#   cold          --data dataset --baseline plain, checkpoint cost measured; folder D gets the blob
#                 and the region captures
#   warm-memory-1, warm-data-1, warm-memory-2, warm-data-2
#                 warm from D, --data memory / --data dataset: must tune no kernel and load
#                 every region's captures
# Each warm launch should load every compiled region's captures: "N captures (N loaded)" in
# its first-step line, and no "no loaded capture fits" warning.
# Everything comes back as one archive, OUTDIR/warm.tgz, renewed after each launch.
#   usage: infra/bench/gpu-h200.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
. infra/bench/machine.sh
bench_start warm "${1:-}"

jpeg_set "$results/dataset.log"

launch() {  # launch NAME SECONDS [bench train arguments ...]
  local name=$1 limit=$2; shift 2
  local started=$SECONDS
  env AUTOTUNE_TRACE="$results/$name.autotune.jsonl" COMPILE_TIMES="$results/$name.compile-times" \
    PYTHONPATH=$PWD/infra/bench/autotune_trace:$PWD timeout "$limit" \
    python -m ffjobs.cli bench train --config train-256 --json --warmup 15 --steps 40 \
    --set model.identity_weights=null "$@" \
    >"$results/$name.json" 2>"$results/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s" | tee -a "$results/times.txt"
  tar czf "$out/warm.tgz" -C "$work" warm
}

launch cold 330 --data dataset --baseline plain --checkpoint-dir "$work/D"
warm=(--no-peak --no-checkpoint --checkpoint-dir "$work/D")
launch warm-memory-1 75 --data memory "${warm[@]}"
launch warm-data-1 75 --data dataset "${warm[@]}"
launch warm-memory-2 75 --data memory "${warm[@]}"
launch warm-data-2 75 --data dataset "${warm[@]}"
python - "$results" <<'PY'
import json, pathlib, re, sys
results = pathlib.Path(sys.argv[1])
for name in ("cold", "warm-memory-1", "warm-data-1", "warm-memory-2", "warm-data-2"):
    try:
        r = json.loads((results / f"{name}.json").read_text())
    except Exception as exc:
        print(name, "no result:", exc)
        continue
    trace = results / f"{name}.autotune.jsonl"
    tuned = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    print(name, r["summary"], f"| {r['images_per_s']:.1f} img/s, process start "
          f"{r.get('process_start_s') or 0:.1f} s, trainer init {r['trainer_init_s']:.2f} s, "
          f"{len(tuned)} kernels tuned ({sum(t['seconds'] for t in tuned):.1f} s), local caches "
          f"{r.get('local_compiler_cache_mb', 0):.0f} MB under {r.get('local_compiler_cache_root')}")
    for times in sorted(results.glob(f"{name}.compile-times.*")):  # the compiler's timers
        picked = re.findall(r"^(AOTAutogradCache.inductor_load|TritonBundler.read_and_emit|"
                            r"PyCodeCache.load_by_key_path)\s+([\d.]+)", times.read_text(), re.M)
        if picked:
            print("    ", times.suffix[1:], ", ".join(f"{k} {v}" for k, v in picked))
    # rank 0's first-step line says how many region captures were loaded, and any region
    # whose loaded captures did not fit says why
    for line in (results / f"{name}.log").read_text().splitlines():
        if line.startswith("first step") or "no loaded capture fits" in line:
            print("   ", line.strip()[:400])
PY

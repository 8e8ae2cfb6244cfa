#!/usr/bin/env bash
# The CPU figures of docs/benchmarks.md, one after another on this machine (quiet is best: the
# validation and checkpoint figures follow the load):
#   validate     ffjobs bench validate --rounds 9: first pass and re-validation
#   checkpoint   ffjobs bench checkpoint: a Python-bound loop beside a thread vs a writer process
#   s3-delay, s3-loopback
#                infra/bench/s3_reads.py: reader threads against the loopback S3 emulator
#   preflight    python -m ffjobs.preflight --local (gloo)
#   train        ffjobs bench train --nproc 2: a functional check of the code path
#   elastic      tests/train/test_elastic_rehearsal.py -s: a two-node kill and restart
# and, where the local stack's environment is sourced (`source .state/local-stack/env.sh`:
# SLURM_CONF set), the mini-cluster's:
#   recovery     ffjobs bench recovery: kill, hang and cut link, new job and fast path
#   trigger-50, trigger-5
#                infra/bench/trigger_watch.py: SlurmJobTrigger watching 50 and 5 jobs
# Each step's stdout goes to OUTDIR/NAME.out, its stderr to OUTDIR/NAME.log.
#   usage: infra/bench/cpu.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: cpu.sh OUTDIR}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ date -u +%FT%TZ; nproc; uptime
  python -c "import torch; print('torch', torch.__version__)"; } >"$out/machine.txt" 2>&1

step() {  # step NAME COMMAND ...
  local name=$1; shift
  local started=$SECONDS
  "$@" >"$out/$name.out" 2>"$out/$name.log"
  echo "$name: exit $? in $((SECONDS - started)) s" | tee -a "$out/times.txt"
}

step validate python -m ffjobs.cli bench validate --json --rounds 9
step checkpoint python -m ffjobs.cli bench checkpoint --json
step s3-delay python infra/bench/s3_reads.py --delay 0.02 --threads 1,4,8,16
step s3-loopback python infra/bench/s3_reads.py --threads 1,4,8
step preflight python -m ffjobs.preflight --local --json
step train python -m ffjobs.cli bench train --nproc 2 --warmup 3 --steps 10 --json
step elastic python -m pytest -s -q -p no:cacheprovider tests/train/test_elastic_rehearsal.py

if [ -n "${SLURM_CONF:-}" ]; then
  step recovery python -m ffjobs.cli bench recovery --json
  step trigger-50 python infra/bench/trigger_watch.py --jobs 50 --sleep 5:25 --poll-s 10 \
    --out "$out/trigger-50.json"
  step trigger-5 python infra/bench/trigger_watch.py --jobs 5 --sleep 20:50 --poll-s 10 \
    --out "$out/trigger-5.json"
else
  echo "mini-cluster figures skipped: SLURM_CONF not set" | tee -a "$out/times.txt"
fi

# Sourced by the GPU benchmark scripts. `machine_facts FILE [EXTRA COMMAND]` writes when and on
# what they ran (UTC date, the GPUs, torch with its CUDA and NCCL versions), then the output of
# EXTRA COMMAND if one is given (gpu-h200x2.sh adds `nvidia-smi topo -m`).
machine_facts() {
  local file=$1; shift
  { date -u +%FT%TZ; nvidia-smi -L
    python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else '-')"
    if [ $# -gt 0 ]; then "$@"; fi
  } >"$file" 2>&1
}

# `jpeg_set LOG`: the train-256 preset's synthetic JPEG set, generated before any timed launch
# (a launch that generates it inside its own time limit measures the generation)
jpeg_set() {
  PYTHONPATH=$PWD timeout 200 python -c "
from ffjobs.config import load_config, resolve_preset
from ffjobs.data.demo import ensure_demo_dataset
ensure_demo_dataset(load_config(resolve_preset('train-256')))" >"$1" 2>&1
}

# `bench_start NAME OUTDIR`: sets out=OUTDIR (made), work (a new scratch folder) and
# results=$work/NAME (made, with machine_facts in it), and the environment every launch needs
bench_start() {
  out=${2:?usage: $0 OUTDIR}
  work=$(mktemp -d)
  results="$work/$1"
  mkdir -p "$out" "$results"
  export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
  machine_facts "$results/machine.txt"
}

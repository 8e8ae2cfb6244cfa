# Sourced by the GPU benchmark scripts: `machine_facts FILE [EXTRA COMMAND]` writes when and on
# what they ran (UTC date, the GPUs, torch with its CUDA and NCCL versions), then the output of
# EXTRA COMMAND if one is given (gpu-2x.sh adds `nvidia-smi topo -m`).
machine_facts() {
  local file=$1; shift
  { date -u +%FT%TZ; nvidia-smi -L
    python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else '-')"
    if [ $# -gt 0 ]; then "$@"; fi
  } >"$file" 2>&1
}

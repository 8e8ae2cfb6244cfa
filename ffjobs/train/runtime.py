"""Process-wide state a training run sets up first: kernel selection and random seeds."""

from __future__ import annotations

import random

import numpy as np
import torch


def configure_backends(deterministic: bool, device: torch.device, cudnn_benchmark: bool) -> None:
    """Deterministic kernels (exact resume) or, on CUDA, TF32 matmuls and, with
    ``cudnn_benchmark``, cuDNN's timing of its algorithms on each convolution's first call."""
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=False)
        torch.backends.cudnn.benchmark = False
    elif device.type == "cuda":
        torch.backends.cudnn.benchmark = cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)

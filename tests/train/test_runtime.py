"""Process-wide backend settings (flags only: no CUDA device is needed to set them)."""

from __future__ import annotations

import pytest
import torch

from ffjobs.train.runtime import configure_backends


@pytest.fixture
def restored():
    saved = (
        torch.backends.cudnn.benchmark,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.are_deterministic_algorithms_enabled(),
    )
    yield
    benchmark, matmul_tf32, cudnn_tf32, deterministic = saved
    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cuda.matmul.allow_tf32 = matmul_tf32
    torch.backends.cudnn.allow_tf32 = cudnn_tf32
    torch.use_deterministic_algorithms(deterministic)


@pytest.mark.parametrize("timing", [True, False])
def test_cuda_times_cudnn_algorithms_only_when_asked(restored, timing):
    configure_backends(False, torch.device("cuda"), cudnn_benchmark=timing)
    assert torch.backends.cudnn.benchmark is timing
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32


def test_deterministic_never_times_cudnn_algorithms(restored):
    configure_backends(True, torch.device("cuda"), cudnn_benchmark=True)
    assert torch.backends.cudnn.benchmark is False
    assert torch.are_deterministic_algorithms_enabled()

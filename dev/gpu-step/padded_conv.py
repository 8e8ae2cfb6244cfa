"""The networks' few-channel convolutions timed as cuDNN runs them and with padded channels.

At the train-256 preset's shapes (batch 32, bf16 autocast, channels_last), forward + backward
of each convolution with 3 (or 1) input or output channels: once as ``nn.Conv2d`` and once with
its channel counts zero-padded to multiples of 8 (zero inputs with zero weights, extra outputs
sliced off: the same sums), eager, with CUDA events; it checks that both give the same output
first (bf16 rounding apart). Tried as a way to tensor-core kernels; it did not pay
(docs/benchmarks.md), so the networks keep plain convolutions.
    usage: python dev/gpu-step/padded_conv.py   (on a CUDA machine)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

BATCH = 32
LAYERS = [  # name, in, out, kernel, stride, padding mode, input size, input needs grad
    ("G stem 7x7 3->64", 3, 64, 7, 1, "reflect", 256, False),
    ("G head 7x7 64->3", 64, 3, 7, 1, "reflect", 256, True),
    ("D scale 1 first 4x4/2 3->64", 3, 64, 4, 2, "zeros", 256, True),
    ("D scale 2 first 4x4/2 3->64", 3, 64, 4, 2, "zeros", 128, True),
    ("D head 3x3 512->1 (scale 1)", 512, 1, 3, 1, "zeros", 32, True),
    ("E first 3x3 3->64", 3, 64, 3, 1, "zeros", 112, True),
]


def padded_conv(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    """``conv(x)`` with its channel counts zero-padded to multiples of 8."""
    pad_in, pad_out = -conv.in_channels % 8, -conv.out_channels % 8
    weight = F.pad(conv.weight, (0, 0, 0, 0, 0, pad_in, 0, pad_out))
    bias = None if conv.bias is None else F.pad(conv.bias, (0, pad_out))
    out = conv._conv_forward(F.pad(x, (0, 0, 0, 0, 0, pad_in)), weight, bias)
    return out[:, : conv.out_channels]


def timed(forward, x, grad_out, iters=30):
    def once():
        out = forward(x)
        out.backward(grad_out)

    for _ in range(5):
        once()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        once()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main() -> None:
    torch.backends.cudnn.benchmark = True
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, batch {BATCH}, bf16")
    print(f"{'layer':32s} {'plain (ms)':>11s} {'padded (ms)':>12s} {'ratio':>6s}")
    total_plain = total_padded = 0.0
    for name, cin, cout, k, stride, mode, size, needs_grad in LAYERS:
        conv = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, padding_mode=mode)
        conv = conv.cuda().to(memory_format=torch.channels_last)
        x = torch.randn(BATCH, cin, size, size, device="cuda")
        x = x.to(memory_format=torch.channels_last).requires_grad_(needs_grad)

        def plain_forward(t, conv=conv):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return conv(t)

        def padded_forward(t, conv=conv):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return padded_conv(conv, t)

        with torch.no_grad():
            a, b = plain_forward(x).float(), padded_forward(x).float()
        # bf16 outputs of sums of up to 64*49 products: a few bf16 ulps (2^-8 relative) apart
        torch.testing.assert_close(b, a, rtol=3e-2, atol=3e-2)
        grad_out = torch.randn_like(a).to(torch.bfloat16)
        ms_plain = timed(plain_forward, x, grad_out)
        ms_padded = timed(padded_forward, x, grad_out)
        total_plain, total_padded = total_plain + ms_plain, total_padded + ms_padded
        print(f"{name:32s} {ms_plain:11.3f} {ms_padded:12.3f} {ms_plain / ms_padded:5.2f}x")
    print(f"{'all (one call each)':32s} {total_plain:11.3f} {total_padded:12.3f}")


if __name__ == "__main__":
    main()

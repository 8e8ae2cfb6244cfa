"""The generator's RGB convolutions (7x7, 3 -> 64 stem and 64 -> 3 head) timed three ways.

cuDNN picks slow kernels for convolutions with 3 input or 3 output channels (the profile in
docs/benchmarks.md). This times forward + backward of each, at the train-256 preset's shapes
(batch 32, 256 px, bf16, channels_last), as cuDNN does it and as one channel-rich 1x1
convolution (the stem over its 147 = 3 x 7 x 7 input taps; the head into 147 output taps,
shifted and summed), compiled. It checks each against cuDNN's result first.
    usage: python dev/gpu-step/thin_conv.py   (on a CUDA machine)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def taps_in(x, weight, bias):  # stem: im2col of a 3-channel input, then a 1x1 convolution
    k = weight.shape[-1]
    xp = F.pad(x, (k // 2,) * 4)
    h, w = x.shape[-2:]
    cols = torch.stack([xp[:, :, i : i + h, j : j + w] for i in range(k) for j in range(k)], 2)
    cols = cols.flatten(1, 2).contiguous(memory_format=torch.channels_last)
    extra = -cols.shape[1] % 8
    cols = F.pad(cols, (0, 0, 0, 0, 0, extra))
    wmat = F.pad(weight.flatten(1), (0, extra))[:, :, None, None]
    return F.conv2d(cols, wmat, bias)


def taps_out(x, weight, bias):  # head: a 1x1 convolution into 3 x 49 taps, shifted and summed
    out, c, k, _ = weight.shape
    xp = F.pad(x, (k // 2,) * 4)
    h, w = x.shape[-2:]
    wt = weight.permute(0, 2, 3, 1).reshape(out * k * k, c, 1, 1)
    extra = -wt.shape[0] % 8
    y = F.conv2d(xp, F.pad(wt, (0, 0, 0, 0, 0, 0, 0, extra)))[:, : out * k * k]
    y = y.unflatten(1, (out, k * k))
    total = sum(y[:, :, i * k + j, i : i + h, j : j + w] for i in range(k) for j in range(k))
    return total + bias[None, :, None, None]


def cudnn(x, weight, bias):
    return F.conv2d(x, weight, bias, padding=weight.shape[-1] // 2)


def bench(fn, x, weight, bias, grad_input: bool) -> float:
    x = x.detach().requires_grad_(grad_input)
    weight = weight.detach().requires_grad_()

    def step():
        with torch.autocast("cuda", torch.bfloat16):
            y = fn(x, weight, bias)
        y.float().square().mean().backward()

    for _ in range(5):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(20):
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> None:
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    n, size = 32, 256
    cases = {
        "stem 3->64": (3, 64, False, taps_in),  # the input is data: no input gradient
        "head 64->3": (64, 3, True, taps_out),
    }
    for name, (cin, cout, grad_input, taps) in cases.items():
        x = torch.randn(n, cin, size, size, device=dev).to(memory_format=torch.channels_last)
        weight = torch.randn(cout, cin, 7, 7, device=dev) / (cin * 49) ** 0.5
        bias = torch.randn(cout, device=dev)
        ref = cudnn(x.double(), weight.double(), bias.double())
        for label, fn in (("cudnn", cudnn), ("taps compiled", torch.compile(taps))):
            with torch.autocast("cuda", torch.bfloat16):
                y = fn(x, weight, bias).double()
            err = ((y - ref).norm() / ref.norm()).item()  # bf16 operands: 1e-3 .. 1e-2
            ms = bench(fn, x, weight, bias, grad_input)
            print(f"{name:12} {label:14} fwd+bwd {ms:7.3f} ms  rel err vs fp64 {err:.2e}")


if __name__ == "__main__":
    main()

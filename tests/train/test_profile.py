"""``ffjobs bench train --profile``: which kind each CUDA kernel counts as."""

from __future__ import annotations

from ffjobs.train.profile import kernel_kind


def test_kernel_kinds_from_cuda_kernel_names():
    assert kernel_kind("triton_poi_fused__to_copy_add_3") == "triton"
    assert kernel_kind("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32") == "conv_matmul"
    assert kernel_kind("void at::native::direct_copy_kernel_cuda") == "copy"
    assert kernel_kind("Memcpy HtoD (Pinned -> Device)") == "copy"
    assert kernel_kind("multi_tensor_apply_kernel<FusedAdam>") == "optimizer"
    assert kernel_kind("void at::native::reduce_kernel<128, 4>") == "other"

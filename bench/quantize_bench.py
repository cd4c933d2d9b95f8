"""`kqe quantize` against a bare llmcompressor oneshot script: same model, inputs and recipe.

    .venv/bin/python -m bench.quantize_bench [--model M] [--schemes fp8-dynamic,awq-w4a16] [--runs 1]

Issue 7's target: `kqe quantize` within 1.2x of the bare script (`bench/bare_oneshot.py`). Both run
as fresh processes, timed wall clock from start to exit, peak RSS from the kernel; the calibration
set is built first and not timed (the bare script reads the same file). Each kqe run builds from
scratch in a throwaway cache (models and sources are linked from the real one). Prints a table and
appends one row per scheme to `results/bench/quantize.csv`; `measure()` returns those rows for
other bench tables.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from kqe.core.records import Checkpoint
from kqe.core.workspace import Workspace

OUT = Path("results/bench/quantize.csv")
BARE = Path(__file__).with_name("bare_oneshot.py")
BARE_SCHEMES = ("awq-w4a16", "gptq-w4a16", "w4a16-rtn", "fp8-dynamic", "fp8-static")
TARGET_RATIO = 1.2
_KQE = Path(sys.executable).with_name("kqe")
_NOT_LINKED = ("checkpoints", "vllm")


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (bytes) and stdout of one process; RuntimeError with its stderr tail."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(command[:4])}… failed: {err.read()[-1500:]}")
        return wall, usage.ru_maxrss * 1024, out.read()


def bench_workspace(real: Workspace, tmp: Path) -> tuple[Path, dict[str, str]]:
    """A project folder and a cache that shares the real cache's models and sources but no builds."""
    project, cache = tmp / "project", tmp / "cache"
    project.mkdir()
    cache.mkdir()
    for entry in real.cache.iterdir() if real.cache.is_dir() else []:
        if entry.name not in _NOT_LINKED:
            (cache / entry.name).symlink_to(entry)
    env = os.environ | {"KQE_HOME": str(cache), "KQE_SERVE_VENV": str(real.serve_venv), "TQDM_DISABLE": "1"}
    return project, env


def same_weights(first: Path, second: Path) -> bool:
    """Whether two checkpoints hold bit-identical tensors under the same names."""
    import torch
    from safetensors.torch import load_file

    def tensors(folder: Path) -> dict[str, torch.Tensor]:
        found: dict[str, torch.Tensor] = {}
        for path in sorted(folder.glob("*.safetensors")):
            found |= load_file(str(path))
        return found

    a, b = tensors(first), tensors(second)
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


def measure(
    model: str = "gemma3-270m",
    schemes: tuple[str, ...] = ("fp8-dynamic", "awq-w4a16"),
    runs: int = 1,
    calibration: str = "ko70",
) -> list[dict[str, object]]:
    """One row per scheme: median wall time of `kqe quantize` and of the bare script, their ratio."""
    from kqe.core.schemes import scheme_info

    unknown = [scheme for scheme in schemes if scheme not in BARE_SCHEMES]
    if unknown:
        raise SystemExit(f"no bare llmcompressor script for {unknown}: choose from {', '.join(BARE_SCHEMES)}")
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="kqe-quantize-bench-") as work:
        project, env = bench_workspace(Workspace.from_env(), Path(work))
        common = ["--model", model, "--tasks", "kmmlu_hard,mmlu", "--limit", "300", "--seed", "1234"]
        _, _, text = timed([str(_KQE), "calibrate", "--mix", calibration, *common, "--json"], env, project)
        calib = json.loads(text)
        base = Path(calib["tokenizer"])
        for scheme in schemes:
            data = calib["path"] if scheme_info(scheme).needs_calibration else "-"
            kqe_runs, bare_runs = [], []
            for _ in range(runs):
                bare_out = Path(work) / "bare"
                bare_runs.append(
                    timed([sys.executable, str(BARE), str(base), data, scheme, str(bare_out)], env, project)
                )
                command = [
                    str(_KQE),
                    "quantize",
                    "--scheme",
                    scheme,
                    "--calibration",
                    calibration,
                    *common,
                    "--json",
                ]
                kqe_runs.append(timed(command, env, project))
                record = Checkpoint.model_validate_json(kqe_runs[-1][2])
                identical = same_weights(Path(record.path), bare_out)
                shutil.rmtree(record.path)
                shutil.rmtree(bare_out)
            kqe_s = statistics.median(run[0] for run in kqe_runs)
            bare_s = statistics.median(run[0] for run in bare_runs)
            rows.append(
                {
                    "when": datetime.now(UTC).isoformat(timespec="seconds"),
                    "cpus": os.cpu_count(),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    "model": model,
                    "scheme": scheme,
                    "calibration": calibration if data != "-" else "none",
                    "runs": runs,
                    "kqe_quantize_s": round(kqe_s, 1),
                    "bare_oneshot_s": round(bare_s, 1),
                    "ratio": round(kqe_s / bare_s, 3),
                    "target_ratio": TARGET_RATIO,
                    "kqe_child_s": record.wall_s,
                    "kqe_peak_rss_gib": round(record.peak_rss_bytes / 2**30, 2),
                    "bare_peak_rss_gib": round(max(run[1] for run in bare_runs) / 2**30, 2),
                    "same_weights": identical,
                }
            )
    return rows


def write_rows(rows: list[dict[str, object]], path: Path = OUT) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    with path.open("a", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    # a SIGTERM (e.g. `timeout`) unwinds like Ctrl-C, so the throwaway cache is removed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    parser = argparse.ArgumentParser(description="kqe quantize vs a bare llmcompressor oneshot script.")
    parser.add_argument("--model", default="gemma3-270m")
    parser.add_argument("--schemes", default="fp8-dynamic,awq-w4a16", help=f"of {', '.join(BARE_SCHEMES)}")
    parser.add_argument("--runs", type=int, default=1, help="runs of each per scheme (median reported)")
    parser.add_argument("--calibration", default="ko70")
    args = parser.parse_args()
    schemes = tuple(s.strip() for s in args.schemes.split(",") if s.strip())
    rows = measure(args.model, schemes, args.runs, args.calibration)
    say(f"{'scheme':14} {'kqe s':>8} {'bare s':>8} {'ratio':>6}  target ≤ {TARGET_RATIO}  same weights")
    for row in rows:
        verdict = "ok" if float(str(row["ratio"])) <= TARGET_RATIO else "OVER"
        say(
            f"{row['scheme']!s:14} {row['kqe_quantize_s']!s:>8} {row['bare_oneshot_s']!s:>8} "
            f"{row['ratio']!s:>6}  {verdict:12}  {row['same_weights']}"
        )
    write_rows(rows)
    say(f"appended {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()

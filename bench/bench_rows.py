"""`make bench`'s results as measurement rows, appended to `results/measurements.jsonl` beside
`results/bench.csv` (and `results/bench/stats_*.csv`) so docs/performance.md shows them after `make docs`.

Each part of bench/suite_bench.py (and bench/continuation_bench.py) gives `Row`s: kqe's runs, an
alternative's, their ratio and a target; each becomes a row for kqe, one for the alternative and one
for the ratio. bench/stats_bench.py gives one dict of numbers per part; bench/doctor_bench.py run alone
its `Run`s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bench.machine import Machine, this_machine
from bench.measurements import MEASUREMENTS, Measurement, append, measured
from bench.stats_bench import SPEED_RUNS, SPEED_SETUPS
from bench.suite_table import Row
from kqe.core.errors import UserError

if TYPE_CHECKING:  # doctor_bench imports this module
    from bench.doctor_bench import Run

PART_TOPICS = {
    "scoring": "bench", "generation": "bench", "matrix": "bench", "quantize": "bench", "executor": "bench",
    "stats": "bench", "continuation": "bench", "cpu-kinds": "cpu-kinds", "doctor": "doctor",
}  # fmt: skip
"""suite_bench's parts (and continuation_bench) → the docs/performance.md topic of their rows."""
BENCH_CSV = "results/bench.csv"
_MEASURE = re.compile(r"^(?P<name>.*?), (?P<unit>items/s|s)(?P<rest>(?: \(.*\))?)$")
"""suite_bench's measure names: "<what>, <unit>" with the CPU kind after the unit in parentheses."""


def split_measure(measure: str) -> tuple[str, str]:
    """("base scoring (_C_AVX2 (AVX2), cpu-small: float32)", "items/s") of "base scoring, items/s
    (_C_AVX2 (AVX2), cpu-small: float32)"; a measure without a unit is a ratio ("x")."""
    found = _MEASURE.match(measure)
    if not found:
        return measure, "x"
    return found["name"] + found["rest"], found["unit"]


def _met(met: bool | None) -> str:
    return {True: "met", False: "NOT met", None: "reported"}[met]


def suite_measurements(part: str, rows: Sequence[Row], quick: bool, machine: Machine) -> list[Measurement]:
    """Rows for kqe's runs, the alternative's and their ratio (a side measured once for several rows,
    as kqe's scoring rate against three alternatives, is recorded once)."""
    topic = PART_TOPICS.get(part, "bench")
    context = f"`make bench` {part} part{', BENCH_FLAGS=--quick' if quick else ''}"
    found: list[Measurement] = []
    for row in rows:
        name, unit = split_measure(row.measure)
        target = f"target {row.target}: {_met(row.met)}" if row.target not in ("", "(no target)") else ""
        note = "; ".join(text for text in (row.note, target) if text)
        ours = f"{name}: kqe" if row.versus else name
        if row.ours and (unit != "x" or row.ratio is None):
            found.append(
                measured(machine, topic, f"{ours} ({context})", row.ours, unit, note=note, source=BENCH_CSV)
            )
        if row.theirs:
            what = f"{name}: {row.versus} ({context})"
            found.append(measured(machine, topic, what, row.theirs, unit, note=row.note, source=BENCH_CSV))
        if row.ratio is not None:
            what = f"{name}: kqe / {row.versus} ({context})" if row.versus else f"{name} ({context})"
            found.append(measured(machine, topic, what, [row.ratio], "x", note=note, source=BENCH_CSV))
    unique: dict[tuple[str, float], Measurement] = {}
    for measurement in found:  # the first of equal sides keeps its note
        unique.setdefault((measurement.what, measurement.value), measurement)
    return list(unique.values())


def record_suite(part: str, rows: Sequence[Row], quick: bool, path: Path = MEASUREMENTS) -> str:
    """Append one suite_bench part's rows; an emulated CPU kind's rows name the emulation."""
    native = [row for row in rows if "emulated" not in row.measure]
    emulated = [row for row in rows if "emulated" in row.measure]
    found = suite_measurements(part, native, quick, this_machine())
    if emulated:
        found += suite_measurements(part, emulated, quick, this_machine(emulating="avx2"))
    return _append(path, found)


# --- stats_bench --------------------------------------------------------------------------------------

SIM_SCENARIOS = {
    "alt": ("kmmlu_hard as run (45 subjects x 5) and mmlu as run (57 x 5), compared together", ""),
    "null": ("the same two tasks with a true Δ of 0", " (null)"),
}
SIM_KEYS = {
    "cover_ko": "CI coverage of the true Δ, kmmlu_hard",
    "cover_en": "CI coverage of the true Δ, mmlu",
    "cover_gap": "CI coverage of the true ko-en gap",
    "loss_ko": "share called 'significant loss', kmmlu_hard",
    "loss_en": "share called 'significant loss', mmlu",
    "loss_any": "share with either task called 'significant loss'",
}
ONE_TASK = {
    "large": "large (45 subjects x 100)",
    "large_null": "large (45 subjects x 100), true Δ 0",
    "rare": "no subjects, rare flips (300 items)",
    "rare_null": "no subjects, rare flips (300 items), true Δ 0",
}
STATS_SUMMARY = {
    "pvalue_suite_max_null_share": (
        "cluster-level p (K 3-45, accuracy and perplexity nulls): highest share of p < 0.05 under no change",
        "<= 0.06",
    ),
    "pvalue_t_min_null_share": ("t(K-1) p (K 3-45): lowest share of p < 0.05 under no change", "0.04-0.06"),
    "pvalue_t_max_null_share": ("t(K-1) p (K 3-45): highest share of p < 0.05 under no change", "0.04-0.06"),
    "grid_min_cover": ("few subjects grid (K 3-45, icc 0-0.2, 900 items): lowest CI coverage", ">= 0.94"),
    "grid_max_null_sig_loss": (
        "few subjects grid (K 3-45, icc 0-0.2, 900 items): highest 'significant loss' share under a true Δ 0",
        "<= 0.06",
    ),
    "mde_power_exact_min": (
        "exact McNemar power at a true loss = the reported MDE, lowest of 6 cases",
        "0.80",
    ),
    "mde_power_exact_max": (
        "exact McNemar power at a true loss = the reported MDE, highest of 6 cases",
        "0.80",
    ),
}


def stats_measurements(part: str, row: Mapping[str, object], machine: Machine) -> list[Measurement]:
    """The headline numbers of one stats_bench part's row (the full grid stays in its CSV)."""
    source = f"results/bench/stats_{part}.csv"
    note = f"{row.get('replicates')} replicates per scenario, {row.get('resamples')} bootstrap resamples"
    replicates = row.get("replicates")
    if part == "mde" and isinstance(replicates, int):
        note = f"{20 * replicates} draws per case"  # run_mde_check draws 20 x replicates
    values: list[tuple[str, float, str, str]] = []  # what, value, unit, note
    for key, value in row.items():
        if not isinstance(value, float | int) or isinstance(value, bool):
            continue
        prefix, _, rest = key.partition("_")
        scenario, _, measure = key.rpartition("_")
        if part == "sim" and prefix in SIM_SCENARIOS and rest in SIM_KEYS:
            scenario, suffix = SIM_SCENARIOS[prefix]
            values.append((f"{SIM_KEYS[rest]}{suffix}: {scenario}", value, "fraction", note))
        elif part == "sim" and scenario in ONE_TASK:
            label = "CI coverage of the true Δ" if measure == "cover" else "share called 'significant loss'"
            values.append((f"{label}: {ONE_TASK[scenario]}", value, "fraction", note))
        elif key in STATS_SUMMARY:
            what, target = STATS_SUMMARY[key]
            values.append((what, value, "fraction", f"{note}; target {target}"))
    found = [
        measured(
            machine,
            "statistics",
            f"{what} (`make bench`, bench/stats_bench.py)",
            [value],
            unit,
            note=text,
            source=source,
        )
        for what, value, unit, text in values
    ]
    return found + _speed(row, machine, source)


def _speed(row: Mapping[str, object], machine: Machine, source: str) -> list[Measurement]:
    """stats_bench's speed part: the median of SPEED_RUNS passes per setup, and the slowest."""
    found = []
    for setup in SPEED_SETUPS:
        median, slowest = row.get(f"speed_{setup}_median_s"), row.get(f"speed_{setup}_max_s")
        if not isinstance(median, float):
            continue
        items = " + ".join(f"{n:,} {task}" for task, (n, _) in SPEED_SETUPS[setup].items())
        what = f"all comparisons of one run: 8 candidates against the base on {items} items (`make bench`)"
        note = f"median of the runs; slowest {slowest:.3g} s" if isinstance(slowest, float) else "median"
        found.append(
            measured(machine, "statistics", what, [median], "s", SPEED_RUNS, note=note, source=source)
        )
    return found


def record_stats(part: str, row: Mapping[str, object], path: Path = MEASUREMENTS) -> str:
    return _append(path, stats_measurements(part, row, this_machine()))


# --- doctor_bench run alone ---------------------------------------------------------------------------


def doctor_measurements(measured_runs: Mapping[str, Sequence[Run]], machine: Machine) -> list[Measurement]:
    """Wall time, CPU time and peak RSS of `kqe doctor FILE --json` per log size, and the RSS growth."""
    found = []
    peaks = []
    for label, runs in measured_runs.items():
        what = f"`kqe doctor FILE --json` on a {label} log (bench/doctor_bench.py)"
        load = f"{min(r.load_avg_1m for r in runs):.2f}–{max(r.load_avg_1m for r in runs):.2f}"
        at = machine.model_copy(update={"load": load})
        peaks.append(max(r.peak_rss_mib for r in runs))
        found += [
            measured(at, "doctor", f"{what}: wall time", [r.wall_s for r in runs], "s"),
            measured(at, "doctor", f"{what}: CPU time", [r.cpu_s for r in runs], "s"),
            measured(at, "doctor", f"{what}: peak RSS, highest of the runs", [peaks[-1]], "MiB", len(runs)),
        ]
    if len(peaks) == 2:
        labels = " / ".join(measured_runs)
        what = f"`kqe doctor` peak RSS, {labels} log (bench/doctor_bench.py)"
        found.append(measured(machine, "doctor", what, [peaks[0] / peaks[1]], "x", note="target < 1.2x"))
    return found


def record_doctor(measured_runs: Mapping[str, Sequence[Run]], path: Path = MEASUREMENTS) -> str:
    return _append(path, doctor_measurements(measured_runs, this_machine()))


def _append(path: Path, rows: list[Measurement]) -> str:
    """Append; what was done, or why not, as one line for the benchmark to print (its CSV is written
    already: a long run must not die here)."""
    try:
        append(path, rows)
    except (UserError, ValueError) as err:
        return f"{len(rows)} rows NOT recorded in {path}: {err}"
    return f"{len(rows)} rows appended to {path} (`make docs` shows them in docs/performance.md)"

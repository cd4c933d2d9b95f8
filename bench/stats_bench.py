"""Benchmarks of the paired statistics (not unit tests): are the CIs honest, is a true null rarely
called a loss, does the MDE mean 80% power, are the cluster-level p-values calibrated under no change
(bench/pvalue_bench.py), and are all comparisons of a full-size run fast?

    .venv/bin/python -m bench.stats_bench [--replicates 2000] [--only sim|clusters|mde|pvalues|speed]

Prints one table per part and appends a row per part to
`results/bench/stats_{sim,clusters,mde,pvalues,speed}.csv`.

The simulation draws each replicate's subjects from a population (base accuracy, P(right→wrong)
and P(wrong→right) per subject from Beta laws), then items within subjects, so the true Δ is the
population mean (1 − E a)·E g − E a·E r, and runs the suite's own comparison on the draw.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np

from evals.statistics.bootstrap import BOOTSTRAP_RESAMPLES, ITEM_FLOOR, _cluster_replicates, percentile_ci
from evals.statistics.pairing import PairedItems, ScoredItem
from evals.statistics.stats import (
    SIGNIFICANT_LOSS,
    compare_paired,
    compare_tasks,
    mcnemar_p,
    minimum_detectable_effect,
)

OUT_DIR = Path("results/bench")
CONCENTRATION = 20.0
"""Beta concentration of the per-subject rates: how much subjects differ from one another."""


@dataclass(frozen=True)
class Scenario:
    """A population of subjects: mean base accuracy, mean P(right→wrong), mean P(wrong→right)."""

    name: str
    subjects: int
    per_subject: int
    base_acc: float
    c2w: float
    w2c: float
    icc: float | None = None
    """Within-subject correlation of each per-subject rate (Beta-Bernoulli: 1 / (concentration + 1));
    None: concentration CONCENTRATION."""

    @property
    def true_delta(self) -> float:
        return (1 - self.base_acc) * self.w2c - self.base_acc * self.c2w

    def null(self) -> Scenario:
        """The same population with P(wrong→right) set so that the true Δ is 0."""
        balanced = self.base_acc * self.c2w / (1 - self.base_acc)
        return Scenario(
            f"{self.name} (null)",
            self.subjects,
            self.per_subject,
            self.base_acc,
            self.c2w,
            balanced,
            self.icc,
        )

    def draw(self, rng: np.random.Generator) -> PairedItems:
        clusters = np.repeat(np.arange(self.subjects), self.per_subject)

        concentration = CONCENTRATION if self.icc is None else 1 / self.icc - 1 if self.icc else None

        def rates(mean: float) -> np.ndarray:
            if self.subjects == 1 or concentration is None:  # one population rate
                return np.full(len(clusters), mean)
            per = rng.beta(mean * concentration, (1 - mean) * concentration, self.subjects)
            return per[clusters]

        base_acc, c2w, w2c = rates(self.base_acc), rates(self.c2w), rates(self.w2c)
        base_ok = rng.random(len(clusters)) < base_acc
        u = rng.random(len(clusters))
        cand_ok = np.where(base_ok, u >= c2w, u < w2c)
        return PairedItems(base_ok=base_ok, cand_ok=cand_ok, clusters=clusters)


KMMLU_HARD = Scenario("kmmlu_hard as run: 45 subjects x 5", 45, 5, 0.30, 0.50, 0.20)
MMLU = Scenario("mmlu as run: 57 subjects x 5", 57, 5, 0.60, 0.10, 0.12)
LARGE = Scenario("large: 45 subjects x 100", 45, 100, 0.45, 0.10, 0.06)
RARE = Scenario("no subjects, rare flips: 300 items", 1, 300, 0.60, 0.03, 0.04)


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


class SimItem(NamedTuple):
    """A scored item as the statistics read it (the `Scored` protocol), cheap to make by the million."""

    task: str
    item_id: str
    correct: bool
    subject: str | None
    gold: int | None = None
    choice_logprobs: list[float] | None = None


def _items(task: str, paired: PairedItems) -> tuple[list[SimItem], list[SimItem]]:
    subjects = [f"s{s}" for s in paired.clusters]

    def make(ok: np.ndarray) -> list[SimItem]:
        return [
            SimItem(task, f"{task}/{i}", v, s)
            for i, (v, s) in enumerate(zip(ok.tolist(), subjects, strict=True))
        ]

    return make(paired.base_ok), make(paired.cand_ok)


def simulate_pair(ko: Scenario, en: Scenario, replicates: int, seed: int) -> dict[str, float]:
    """KMMLU-HARD and MMLU as `make eval` compares them: Holm across both, the gap between them."""
    rng = np.random.default_rng(seed)
    covered = {"ko": 0, "en": 0, "gap": 0}
    losses = {"ko": 0, "en": 0, "any": 0}
    true_gap = ko.true_delta - en.true_delta
    for replicate in range(replicates):
        ko_base, ko_cand = _items("kmmlu_hard", ko.draw(rng))
        en_base, en_cand = _items("mmlu", en.draw(rng))
        result = compare_tasks(
            "base",
            "cand",
            {"kmmlu_hard": ko_base, "mmlu": en_base},
            {"kmmlu_hard": ko_cand, "mmlu": en_cand},
            seed=replicate,
        )
        k, e = result["kmmlu_hard"], result["mmlu"]
        covered["ko"] += k.ci_low <= ko.true_delta <= k.ci_high
        covered["en"] += e.ci_low <= en.true_delta <= e.ci_high
        assert k.ko_en_gap_ci_low is not None and k.ko_en_gap_ci_high is not None
        covered["gap"] += k.ko_en_gap_ci_low <= true_gap <= k.ko_en_gap_ci_high
        losses["ko"] += k.verdict == SIGNIFICANT_LOSS
        losses["en"] += e.verdict == SIGNIFICANT_LOSS
        losses["any"] += SIGNIFICANT_LOSS in (k.verdict, e.verdict)
    rates = {f"cover_{key}": value / replicates for key, value in covered.items()}
    return rates | {f"loss_{key}": value / replicates for key, value in losses.items()}


def simulate_one(scenario: Scenario, replicates: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    covered = losses = 0
    for replicate in range(replicates):
        result = compare_paired("sim", "base", "cand", scenario.draw(rng), seed=replicate)
        covered += result.ci_low <= scenario.true_delta <= result.ci_high
        losses += result.verdict == SIGNIFICANT_LOSS
    return {"cover": covered / replicates, "loss": losses / replicates}


def _line(name: str, true_delta: float, cover: float, loss: float, note: str = "") -> None:
    say(f"{name:44} {true_delta:+8.4f} {cover:9.3f} {loss:10.3f}{note}")


def run_simulation(replicates: int) -> dict[str, float]:
    say(f"## CI coverage of the true Δ and 'significant loss' rate ({replicates} replicates each)")
    say(f"{'scenario':44} {'true Δ':>8} {'coverage':>9} {'sig. loss':>10}")
    row: dict[str, float] = {}
    for label, (ko, en) in {"alt": (KMMLU_HARD, MMLU), "null": (KMMLU_HARD.null(), MMLU.null())}.items():
        started = time.perf_counter()
        rates = simulate_pair(ko, en, replicates, seed=1 if label == "alt" else 2)
        _line(ko.name, ko.true_delta, rates["cover_ko"], rates["loss_ko"])
        _line(en.name, en.true_delta, rates["cover_en"], rates["loss_en"])
        gap, took = ko.true_delta - en.true_delta, time.perf_counter() - started
        _line("  ko-en gap / either task", gap, rates["cover_gap"], rates["loss_any"], f"  ({took:.0f} s)")
        row |= {f"{label}_{key}": value for key, value in rates.items()}
    for label, scenario in (("large", LARGE), ("rare", RARE)):
        for null, population in ((False, scenario), (True, scenario.null())):
            rates = simulate_one(population, replicates, seed=3 + null)
            _line(population.name, population.true_delta, rates["cover"], rates["loss"])
            row |= {f"{label}{'_null' if null else ''}_{key}": value for key, value in rates.items()}
    return row


CLUSTER_COUNTS = (3, 5, 9, 20, 45)
GRID_COLUMNS = {"cover": 9, "old_method_cover": 16, "floored": 8, "sig_loss": 10}
"""Per-cell shares printed, with their column widths."""
GRID_HEADS = ("coverage", "old: percentile", "floored", "sig. loss")
ICCS = (0.0, 0.05, 0.2)
GRID_ITEMS = 900


def grid_scenario(subjects: int, icc: float) -> Scenario:
    """900 items in `subjects` subjects, half right, 12% of right answers lost and 6% of wrong ones
    gained (Δ = −3 points); its null() flips 8% each way (4% of all items each way)."""
    return Scenario(f"K={subjects} icc={icc:g}", subjects, GRID_ITEMS // subjects, 0.5, 0.12, 0.06, icc)


def _old_method_ci(paired: PairedItems, seed: int) -> tuple[float, float]:
    """The previous method, for comparison: the stretched cluster bootstrap's percentile interval, no
    item floor (the symmetric interval with the floor replaced it after this grid)."""
    _, index = np.unique(paired.clusters, return_inverse=True)
    rng = np.random.default_rng([seed, 7])
    base_star, cand_star = _cluster_replicates(paired, index, BOOTSTRAP_RESAMPLES, rng)
    low, high = percentile_ci(cand_star - base_star, 0.5 / len(paired.base_ok))
    return low, high


def _grid_cell(scenario: Scenario, replicates: int, rng: np.random.Generator) -> dict[str, float]:
    """Shares of replicates: CI covers the truth, the old method's covers it, floor used, loss called."""
    counts = dict.fromkeys(GRID_COLUMNS, 0)
    for replicate in range(replicates):
        paired = scenario.draw(rng)
        result = compare_paired("sim", "base", "cand", paired, seed=replicate)
        low, high = _old_method_ci(paired, replicate)
        counts["cover"] += result.ci_low <= scenario.true_delta <= result.ci_high
        counts["old_method_cover"] += low <= scenario.true_delta <= high
        counts["floored"] += result.ci_method == ITEM_FLOOR
        counts["sig_loss"] += result.verdict == SIGNIFICANT_LOSS
    return {key: value / replicates for key, value in counts.items()}


def run_cluster_grid(replicates: int) -> dict[str, float]:
    """Coverage of the true Δ and the 'significant loss' rate per number of subjects × correlation."""
    say(f"\n## Few subjects: coverage and 'significant loss' rate ({replicates} replicates per cell)")
    widths = GRID_COLUMNS.values()
    heads = " ".join(f"{head:>{width}}" for head, width in zip(GRID_HEADS, widths, strict=True))
    say(f"{'K':>3} {'icc':>5} {'case':>5} {'true Δ':>8} {heads}")
    row: dict[str, float] = {}
    for subjects in CLUSTER_COUNTS:
        for icc in ICCS:
            for case in ("null", "loss"):
                scenario = grid_scenario(subjects, icc)
                scenario = scenario.null() if case == "null" else scenario
                rng = np.random.default_rng([subjects, int(icc * 100), case == "loss"])
                rates = _grid_cell(scenario, replicates, rng)
                cells = " ".join(f"{rates[key]:{width}.3f}" for key, width in GRID_COLUMNS.items())
                say(f"{subjects:3d} {icc:5.2f} {case:>5} {scenario.true_delta:+8.4f} {cells}")
                row |= {f"k{subjects}_icc{icc:g}_{case}_{key}": value for key, value in rates.items()}
    lowest = min(value for key, value in row.items() if key.endswith("_cover") and "old_method" not in key)
    null_loss = max(value for key, value in row.items() if key.endswith("_null_sig_loss"))
    say(
        f"lowest coverage {lowest:.3f} (target >= 0.94); highest null 'significant loss' {null_loss:.3f} "
        "(target <= 0.06)"
    )
    return {"grid_min_cover": lowest, "grid_max_null_sig_loss": null_loss, **row}


def run_mde_check(replicates: int) -> dict[str, float]:
    """Power of the exact McNemar test (and its mid-p) when the true loss equals the reported MDE."""
    say(f"\n## MDE check: simulated power at a true loss = MDE ({20 * replicates} draws each, target 0.80)")
    say(f"{'n':>6} {'flip rate':>9} {'MDE':>8} {'exact':>7} {'mid-p':>7}")
    rng = np.random.default_rng(5)
    powers = []
    for n, flip_rate in ((225, 0.70), (300, 0.10), (300, 0.03), (1000, 0.20), (14042, 0.10), (35000, 0.05)):
        mde = minimum_detectable_effect(n, flip_rate)
        discordant = max(flip_rate, mde)
        draws = rng.multinomial(
            n, [(discordant + mde) / 2, (discordant - mde) / 2, 1 - discordant], 20 * replicates
        )
        loss = draws[:, 0] > draws[:, 1]
        exact = float(np.mean(loss & (mcnemar_p(draws[:, 0], draws[:, 1]) < 0.05)))
        mid = float(np.mean(loss & (mcnemar_p(draws[:, 0], draws[:, 1], mid=True) < 0.05)))
        powers.append(exact)
        say(f"{n:6d} {flip_rate:9.2f} {mde:8.4f} {exact:7.3f} {mid:7.3f}")
    return {"mde_power_exact_min": min(powers), "mde_power_exact_max": max(powers)}


def _checkpoint(
    sizes: dict[str, tuple[int, int]], ok: dict[str, np.ndarray], rng: np.random.Generator
) -> dict[str, list[ScoredItem]]:
    """Per-item results of one checkpoint: given correctness, subjects in turn, random log-probs."""
    items = {}
    for task, (n, subjects) in sizes.items():
        logprobs = rng.normal(-2.0, 1.0, size=(n, 4)).tolist()
        items[task] = [
            ScoredItem(
                task=task,
                item_id=f"{task}/{i}",
                correct=bool(ok[task][i]),
                subject=f"s{i % subjects}",
                gold=0,
                choice_logprobs=logprobs[i],
            )
            for i in range(n)
        ]
    return items


def comparison_times(sizes: dict[str, tuple[int, int]], runs: int, candidates: int = 8) -> list[float]:
    """Seconds per pass over every comparison of one run: `candidates` checkpoints against the base on
    tasks of (items, subjects), 15% of answers flipped, `runs` passes."""
    rng = np.random.default_rng(6)
    base_ok = {task: rng.random(n) < 0.45 for task, (n, _) in sizes.items()}
    base = _checkpoint(sizes, base_ok, rng)
    flipped = [
        {task: ok ^ (rng.random(len(ok)) < 0.15) for task, ok in base_ok.items()} for _ in range(candidates)
    ]
    cands = [_checkpoint(sizes, ok, rng) for ok in flipped]
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        for index, cand in enumerate(cands):
            compare_tasks("base", f"cand{index}", base, cand)
        times.append(time.perf_counter() - started)
    return times


SPEED_SETUPS = {"kmmlu35k": {"kmmlu": (35_000, 45)}, "both49k": {"kmmlu": (35_030, 45), "mmlu": (14_042, 57)}}
SPEED_RUNS = 5


def run_speed(runs: int = SPEED_RUNS, candidates: int = 8) -> dict[str, float]:
    """All comparisons of one run: 8 candidates against the base, 10,000 resamples each."""
    say(
        f"\n## Speed: {candidates} candidates vs base, {BOOTSTRAP_RESAMPLES} resamples, median of {runs} runs"
    )
    row: dict[str, float] = {}
    for label, sizes in SPEED_SETUPS.items():
        times = comparison_times(sizes, runs, candidates)
        median = statistics.median(times)
        items = " + ".join(f"{n:,} {task}" for task, (n, _) in sizes.items())
        say(f"{items:32} runs {', '.join(f'{t:.2f}' for t in times)} s   median {median:.2f} s")
        row |= {f"speed_{label}_median_s": median, f"speed_{label}_max_s": max(times)}
    return row


def append_row(part: str, row: dict[str, object]) -> None:
    """One row per run in `results/bench/stats_<part>.csv`; a file with other columns is left alone."""
    path = OUT_DIR / f"stats_{part}.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    header = ",".join(row)
    if path.exists() and path.read_text(encoding="utf-8").split("\n", 1)[0] != header:
        say(f"{path} has other columns: move it away to record this run")
        return
    with path.open("a", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        if handle.tell() == 0:
            writer.writerow(row)
        writer.writerow(f"{v:.4f}" if isinstance(v, float) else v for v in row.values())
    say(f"row appended to {path}")


def main() -> None:
    from bench import bench_rows  # here: it reads this module's SPEED_* at its import
    from bench.pvalue_bench import run_pvalue_calibration  # here: it reads this module's grid

    parser = argparse.ArgumentParser(description="Benchmarks of the paired statistics.")
    parser.add_argument("--replicates", type=int, default=2000, help="simulation replicates per scenario")
    parts_named = ("sim", "clusters", "mde", "pvalues", "speed")
    parser.add_argument("--only", choices=parts_named, help="run one part only")
    args = parser.parse_args()
    meta: dict[str, object] = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "replicates": args.replicates,
        "resamples": BOOTSTRAP_RESAMPLES,
    }
    parts = {
        "sim": run_simulation,
        "clusters": run_cluster_grid,
        "mde": run_mde_check,
        "pvalues": lambda replicates: run_pvalue_calibration(replicates, CLUSTER_COUNTS, say),
        "speed": lambda _: run_speed(),
    }
    for part, run in parts.items():
        if args.only in (None, part):
            row = meta | run(args.replicates)
            append_row(part, row)
            say(bench_rows.record_stats(part, row))


if __name__ == "__main__":
    main()

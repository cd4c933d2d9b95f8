"""This machine's facts as a measurement row records them, and `make bench`'s results as rows
(bench/machine.py, bench/bench_rows.py): converted from the records the benchmarks make, never run."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import bench_rows
from bench.doctor_bench import Run
from bench.machine import CPU_FLAGS, Machine, cpu_name, this_machine
from bench.measurements import TOPICS, load
from bench.suite_table import Row

MACHINE = Machine(
    date="2026-12-06", cpu="AMD EPYC (AVX2 only), 2 cores", cpu_flags="avx2", load="1.5", commit="abc1234"
)


def test_this_machine() -> None:
    machine = this_machine()
    assert set(machine.cpu_flags.split()) <= set(CPU_FLAGS)
    assert machine.date == datetime.now(UTC).date().isoformat()
    emulated = this_machine(emulating="avx2")
    assert emulated.cpu_flags == "avx2" and " emulating AVX2, " in emulated.cpu


@pytest.mark.parametrize(
    ("info", "flags", "name"),
    [
        ({"model name": "Intel(R) Xeon(R) Platinum 8480+", "cpu family": "6", "model": "143"},
         CPU_FLAGS, "Intel Xeon (Sapphire Rapids: AVX-512 BF16 + AMX)"),
        ({"model name": "Intel(R) Xeon(R) Processor", "cpu family": "6", "model": "85"},
         ("avx2", "avx512f", "avx512_vnni"), "Intel Xeon (AVX-512, no BF16)"),
        ({"model name": "AMD EPYC 7B13", "cpu family": "25"}, ("avx2",), "AMD EPYC (AVX2 only)"),
        ({"model name": "AMD EPYC 9B14", "cpu family": "25"}, CPU_FLAGS[:4],
         "AMD EPYC Zen 4 (AVX-512 BF16, no AMX)"),
        ({"model name": "Apple M2"}, (), "Apple M2 (no AVX2)"),
    ],
)  # fmt: skip
def test_cpu_names_in_the_docs_style(info: dict[str, str], flags: tuple[str, ...], name: str) -> None:
    assert cpu_name(info, flags) == name


def test_suite_bench_rows_become_measurements() -> None:
    """The rows of results/bench.csv's first run, as suite_bench made them."""
    scoring = [
        Row("MC scoring, items/s", [6.26, 6.88, 6.98], "lm_eval --model hf", [0.80, 0.82, 0.90],
            ">= 3x", 8.3, True, "50 items; same answer as hf on 49/50"),
        Row("MC scoring, items/s", [6.26, 6.88, 6.98], "lm_eval --model vllm", [0.42, 0.45],
            ">= 0.9x", 15.8, True, "50 items"),
    ]  # fmt: skip
    found = bench_rows.suite_measurements("scoring", scoring, False, MACHINE)

    assert [(m.what.split(" (`make bench`")[0], m.value, m.unit) for m in found] == [
        ("MC scoring: kqe", 6.88, "items/s"),
        ("MC scoring: lm_eval --model hf", 0.82, "items/s"),
        ("MC scoring: kqe / lm_eval --model hf", 8.3, "x"),
        ("MC scoring: lm_eval --model vllm", 0.435, "items/s"),
        ("MC scoring: kqe / lm_eval --model vllm", 15.8, "x"),
    ]
    kqe = found[0]
    assert (kqe.topic, kqe.low, kqe.high, kqe.spread, kqe.runs, kqe.source) == (
        "bench",
        6.26,
        6.98,
        "min-max",
        3,
        "results/bench.csv",
    )
    assert kqe.note == "50 items; same answer as hf on 49/50; target >= 3x: met"
    assert (kqe.cpu, kqe.commit) == (MACHINE.cpu, MACHINE.commit)

    doctor = [
        Row("kqe doctor, 50 MB log, s", [2.78, 2.82, 2.95], "", [], "< 5 s", None, True, "CPU 2.78 s"),
        Row("kqe doctor, peak RSS 50 MB / 5 MB", [1.04], "", [], "< 1.2x", 1.04, True, "memory bounded"),
    ]
    found = bench_rows.suite_measurements("doctor", doctor, True, MACHINE)
    assert [(m.topic, m.value, m.unit, m.runs) for m in found] == [
        ("doctor", 2.82, "s", 3),
        ("doctor", 1.04, "x", 1),
    ]
    assert "BENCH_FLAGS=--quick" in found[0].what

    kind = "base scoring, items/s (_C_AVX2 (AVX2, emulated), cpu-small: float32)"
    emulated = Row(kind, [4.09, 4.87], "", [], ">= 4 items/s", None, True)
    found = bench_rows.suite_measurements("cpu-kinds", [emulated], False, MACHINE)
    assert found[0].what.startswith("base scoring (_C_AVX2 (AVX2, emulated), cpu-small: float32)")
    assert (found[0].topic, found[0].value, found[0].unit) == ("cpu-kinds", 4.48, "items/s")


def test_record_suite_appends_and_never_raises(tmp_path: Path) -> None:
    path = tmp_path / "measurements.jsonl"
    rows = [
        Row("quantize fp8-dynamic, s", [17.9], "bare llmcompressor script", [17.8], "<= 1.2x", 1.006, True)
    ]
    assert bench_rows.record_suite("quantize", rows, False, path).startswith("3 rows appended")
    assert len(load(path)) == 3
    path.write_text("broken\n", encoding="utf-8")
    assert "NOT recorded" in bench_rows.record_suite("quantize", rows, False, path)


def test_stats_bench_rows_become_measurements() -> None:
    row_ = {
        "when": "2026-12-01T00:00:00+00:00",
        "cpus": 2,
        "replicates": 2000,
        "resamples": 10000,
        "alt_cover_ko": 0.951,
        "alt_loss_any": 0.62,
        "null_loss_ko": 0.021,
        "large_null_cover": 0.948,
        "grid_min_cover": 0.941,
        "k3_icc0_null_cover": 0.97,
        "speed_kmmlu35k_median_s": 1.23,
        "speed_kmmlu35k_max_s": 1.27,
    }
    found = bench_rows.stats_measurements("sim", row_, MACHINE)
    assert [(m.value, m.unit) for m in found] == [
        (0.951, "fraction"),
        (0.62, "fraction"),
        (0.021, "fraction"),
        (0.948, "fraction"),
        (0.941, "fraction"),
        (1.23, "s"),
    ]
    assert {m.topic for m in found} == {"statistics"} and found[0].source == "results/bench/stats_sim.csv"
    assert found[2].what.startswith("share called 'significant loss', kmmlu_hard (null): the same two tasks")
    assert found[3].what.startswith("CI coverage of the true Δ: large (45 subjects x 100), true Δ 0")
    assert found[-1].runs == 5 and "35,000 kmmlu" in found[-1].what and "slowest 1.27 s" in found[-1].note


def test_doctor_bench_runs_become_measurements() -> None:
    runs = {
        "50 MB": [Run(2.8, 2.7, 57.0, 0.43), Run(2.9, 2.8, 56.0, 0.51)],
        "5 MB": [Run(0.9, 0.8, 55.0, 0.45)],
    }
    found = bench_rows.doctor_measurements(runs, MACHINE)
    assert [(m.value, m.unit) for m in found] == [
        (2.85, "s"),
        (2.75, "s"),
        (57.0, "MiB"),
        (0.9, "s"),
        (0.8, "s"),
        (55.0, "MiB"),
        (1.036, "x"),
    ]
    assert found[0].load == "0.43–0.51" and found[0].spread == "min-max" and found[-1].topic == "doctor"


def test_topics_are_the_briefs() -> None:
    assert list(TOPICS)[:3] == ["setup", "first-run", "tests"] and len(TOPICS) == 16
    assert set(bench_rows.PART_TOPICS.values()) <= set(TOPICS)


def test_generation_rows_compare_with_the_best_concurrency_and_count_agreement(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from bench import generation_bench, suite_bench
    from bench.generation_bench import Generated
    from kqe.core.workspace import Workspace

    answers = {doc: "A" for doc in range(4)}
    ours = Generated("kqe generation", [2.0, 2.0, 4.0], answers)
    local = [
        Generated(f"lm_eval --model local-completions, num_concurrent={c}", [seconds], dict(answers))
        for c, seconds in ((1, 8.0), (4, 1.0), (8, 3.0))
    ]
    hf_default = Generated("lm_eval --model hf, batch_size=1", [20.0], dict(answers))
    hf = Generated("lm_eval --model hf, batch_size=8", [5.0], answers | {3: "B"})
    monkeypatch.setattr(generation_bench, "measure", lambda *args: ([ours, *local], [hf_default, hf]))
    settings = suite_bench.QUICK
    ws = Workspace(root=tmp_path, cache=tmp_path, serve_venv=tmp_path)
    rows = suite_bench.generation_rows(ws, settings)
    best, versus_default, versus_hf = rows
    assert best.versus.endswith("num_concurrent=4")  # the fastest of the API model's settings
    assert best.ratio == pytest.approx(1.0 / 2.0) and best.met is False
    assert versus_default.ratio == pytest.approx(10.0) and versus_default.met is None  # no target there
    assert versus_hf.versus.endswith("batch_size=8") and versus_hf.target == ">= 3x"
    assert versus_hf.ratio == pytest.approx(5.0 / 2.0) and versus_hf.met is False
    assert "same filtered answer on 4/4" in best.note and "on 3/4" in versus_hf.note
    assert best.ours == [settings.generation_items / s for s in ours.runs_s]
    measurements = bench_rows.suite_measurements("generation", rows, True, MACHINE)
    assert {m.topic for m in measurements} == {"bench"}

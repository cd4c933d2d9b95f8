"""Placement (fast): the guide's 14B-on-a-4090 case planned without a GPU or the hub, the fallbacks in
the guide's order on the GPUs a machine may have, and one-line errors for bad targets and profiles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from evals.planning.placement import check_profile, place, target_from
from evals.planning.planner import plan
from evals.planning.vllm_memory import PlanRequest, gpu_named
from evals.serving.cpu import CpuKernels
from evals.serving.hardware import Device, for_device
from evals.serving.serve import load_profile
from kqe.cli import main
from kqe.core.errors import UserError
from kqe.core.records import ServeProfile
from kqe.core.registry import load_registry

QWEN = load_registry()["qwen2.5-14b"]
CHECKPOINTS = {"bf16": "bf16", "awq-w4a16-ko70": "awq-w4a16", "fp8-dynamic": "fp8-dynamic"}
RTX4090 = "NVIDIA GeForce RTX 4090"


def gpus(count: int, name: str = RTX4090, gib: float = 23.54, capability: float = 8.9) -> Device:
    return Device("gpu", capability, name, count=count, memory_gib=gib)


def placements(local: Device, score_profile: ServeProfile | None = None) -> dict:
    target = target_from(gpu_named("rtx4090"), None, load_profile("rtx4090-16k"))
    planned = place(QWEN, CHECKPOINTS, target, local, target.profile, score_profile)
    return {p.checkpoint: p for p in planned.checkpoints}


def eval_cli(*args: str) -> tuple[int, str]:
    # TQDM_DISABLE in env: the CLI sets it, and CliRunner restores only the variables it was given
    env = {"COLUMNS": "200", "TQDM_DISABLE": "1"}
    result = CliRunner().invoke(main, ["eval", "--model", "qwen2.5-14b", *args], env=env)
    return result.exit_code, result.output


def test_dry_run_json_answers_the_guides_case_without_a_gpu_or_the_hub() -> None:
    code, out = eval_cli("--target-gpu", "rtx4090", "--profile", "rtx4090-16k", "--dry-run", "--json")
    assert code == 0, out
    plan_json = json.loads(out[out.index("{") :])
    assert plan_json["target"]["gpu"] == "rtx4090" and plan_json["target"]["profile"] == "rtx4090-16k"
    rows = {c["name"]: c for c in plan_json["checkpoints"]}
    base = rows["bf16"]
    assert base["fits_target"] is False and base["pattern"] == "A" and base["shortfall_gib"] > 0
    assert base["score_placement"]["device"] == "cpu" and base["score_placement"]["profile"] == "cpu-small"
    for name in ("awq-w4a16-ko70", "fp8-dynamic"):
        row = rows[name]
        request = PlanRequest.for_profile(
            QWEN, row["scheme"], load_profile("rtx4090-16k"), "gpu", gpu=gpu_named("rtx4090")
        )
        kqe_plan = plan(request)  # what `kqe plan` prints for the same GPU and profile
        assert row["fits_target"] is True and row["memory_source"] == "planner"
        assert (row["weights_gib"], row["kv_cache_tokens"], row["max_concurrency"]) == (
            kqe_plan.weights_gib,
            kqe_plan.kv_cache_tokens,
            kqe_plan.max_concurrency,
        )
    assert rows["awq-w4a16-ko70"]["kv_cache_tokens"] > 2 * rows["fp8-dynamic"]["kv_cache_tokens"]
    assert set(rows["bf16"]["score_placement"]) == {
        "profile",
        "device",
        "tensor_parallel_size",
        "cpu_offload_gib",
        "kv_cache_dtype",
        "why",
    }


def test_the_target_profile_defaults_to_the_one_named_for_the_gpu() -> None:
    code, out = eval_cli("--target-gpu", "4090", "--dry-run")
    assert code == 0, out
    assert "target NVIDIA GeForce RTX 4090 24 GB ×1 under rtx4090-16k" in out
    assert "bf16: does not fit (A, short" in out and "awq-w4a16-ko70: fits" in out


def test_fallbacks_follow_the_guides_order_on_the_gpus_a_machine_has() -> None:
    one = placements(gpus(1))
    assert (
        one["bf16"].score is not None
        and one["bf16"].score.profile.cpu_offload_gib > one["bf16"].shortfall_gib
    )
    assert one["bf16"].score.why.startswith("offload") and one["bf16"].memory_source == "planner"
    assert one["awq-w4a16-ko70"].memory_source == "vllm-log"  # this machine is the target: measured
    assert one["awq-w4a16-ko70"].score is not None and one["awq-w4a16-ko70"].score.why == "fits the target"
    two = placements(gpus(2))
    assert two["bf16"].score is not None and two["bf16"].score.profile.tensor_parallel_size == 2
    assert two["bf16"].score.profile.cpu_offload_gib == 0
    big = placements(gpus(1, "NVIDIA H100 80GB HBM3", 79.2, 9.0))
    assert big["bf16"].score is not None and big["bf16"].score.profile.tensor_parallel_size == 1
    assert all(p.memory_source == "planner" for p in big.values())  # an H100 does not measure a 4090


def test_a_checkpoint_that_fits_nowhere_gets_a_reason_unless_a_score_profile_is_named() -> None:
    small = gpus(1, "NVIDIA T400 2GB", 1.55, 7.5)
    nowhere = placements(small)["bf16"]
    assert nowhere.score is None and nowhere.reason is not None and nowhere.reason.startswith("not scored: ")
    assert "\n" not in nowhere.reason and "--score-profile" in nowhere.reason
    named = placements(small, load_profile("shared-gpu"))["bf16"]
    assert named.score is not None and named.score.profile.name == "shared-gpu"


def test_a_machine_without_a_gpu_scores_everything_on_its_cpu() -> None:
    on_cpu = placements(Device("cpu"), load_profile("cpu-small"))
    assert {p.score.device for p in on_cpu.values() if p.score} == {"cpu"}
    assert {p.memory_source for p in on_cpu.values()} == {"planner"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-gpu", "v100", "--dry-run"], "unknown GPU 'v100': known GPUs are rtx4090 (4090), "),
        (["--target-gpu", "4090", "--score-profile", "nope", "--dry-run"], "unknown serve profile 'nope'"),
        (
            ["--target-gpu", "l40s", "--dry-run"],
            "no serve profile is the default for --target-gpu l40s: give --profile",
        ),
        (["--json"], "--json prints the plan of --dry-run"),
    ],
)
def test_bad_targets_are_one_line_errors(args: list[str], message: str) -> None:
    code, out = eval_cli(*args)
    assert code != 0 and message in out and "Traceback" not in out
    assert len([line for line in out.splitlines() if line.strip()]) <= 3


def test_tensor_parallel_that_does_not_divide_the_heads_and_offload_on_cpu_are_refused() -> None:
    odd = load_profile("rtx4090-16k").model_copy(update={"name": "tp3", "tensor_parallel_size": 3})
    with pytest.raises(
        UserError, match=re.escape("tensor parallel size 3 does not divide qwen2.5-14b's 40 attention heads")
    ):
        check_profile(QWEN, odd, "gpu", "--profile")
    offload = load_profile("cpu-small").model_copy(update={"name": "off", "cpu_offload_gib": 4.0})
    with pytest.raises(UserError, match="--score-profile off sets cpu_offload_gib, a GPU setting"):
        place(QWEN, CHECKPOINTS, None, Device("cpu"), load_profile("cpu-small"), offload)


def test_aliases_name_the_cards_people_say() -> None:
    assert [gpu_named(n).name for n in ("4090", "RTX4090", "h100", "a100", "a100-40g")] == [
        "rtx4090",
        "rtx4090",
        "h100-80g",
        "a100-80g",
        "a100-40g",
    ]


def test_a_profile_without_offload_keys_as_before() -> None:
    """cpu-small as an AVX-512 BF16 CPU resolves it (compiled, as it was then) keys as the default run
    committed then (tests/data/leaderboards/gemma3-270m-schema3.csv) did."""
    bf16_cpu = Device("cpu", cpu_kernels=CpuKernels("_C", w4a16=True))
    profile = for_device(load_profile("cpu-small").model_copy(update={"enforce_eager": False}), bf16_cpu)
    assert profile.model_copy(update={"cpu_offload_gib": 2.0}).key != profile.key
    committed = Path(__file__).parent / "data" / "leaderboards" / "gemma3-270m-schema3.csv"
    assert f"cpu-small:{profile.key}" in committed.read_text(encoding="utf-8")

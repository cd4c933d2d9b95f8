"""Choosing the executor, and the Ray executor's checks before any work: one-line errors, resources."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from evals.planning.placement import Placement, ScorePlacement
from evals.serving.serve import load_profile
from kqe.core.errors import UserError
from kqe.pipeline.executors import LocalExecutor, executor_named
from kqe.pipeline.matrix import MatrixEntry
from kqe.pipeline.ray_executor import (
    GPU_RESOURCE,
    RayExecutor,
    check_reachable,
    import_ray,
    run_checkpoint_task,
    unmet_by,
)


def test_local_is_the_default_and_an_address_without_ray_is_refused() -> None:
    assert isinstance(executor_named("local"), LocalExecutor)
    with pytest.raises(UserError, match=r"--ray-address 10.0.0.1:6379 needs --executor ray"):
        executor_named("local", "10.0.0.1:6379")
    with pytest.raises(UserError, match="not an executor: use one of local, ray"):
        executor_named("slurm")


def test_without_ray_installed_the_error_gives_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` then fails as when it is not installed
    with pytest.raises(UserError, match=r"needs Ray, which is not installed here: KQE_EXTRAS=ray make setup"):
        import_ray()


def test_an_unreachable_address_is_one_line_naming_it() -> None:
    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        with pytest.raises(UserError, match=rf"--ray-address {address}: nothing answers there") as caught:
            check_reachable(address)
    assert "\n" not in str(caught.value) and "ray start --head" in str(caught.value)
    with pytest.raises(UserError, match="is not host:port"):
        check_reachable("headnode")
    with pytest.raises(UserError, match="Ray Client address"):
        check_reachable("ray://headnode:10001")


def test_a_request_no_node_can_meet_is_said_with_what_the_nodes_have() -> None:
    offers = [{"CPU": 8.0, "GPU": 1.0, "memory": 1e10, "node:10.0.0.2": 1.0}, {"CPU": 4.0}]
    why = unmet_by({"num_cpus": 1, "num_gpus": 2}, offers)
    assert why == "no node of the Ray cluster has 1 CPU, 2 GPU (its nodes: 8 CPU, 1 GPU; 4 CPU)"
    assert unmet_by({"num_cpus": 1, "num_gpus": 1}, offers) is None
    assert unmet_by({"num_cpus": 4}, offers) is None
    assert unmet_by({"num_cpus": 1, "resources": {"kqe-gpu:h100": 0.001}}, offers) is not None


def gpu_matrix(tp: int, source: str, gpu: str = "rtx4090") -> SimpleNamespace:
    """What `RayExecutor.request` reads of a run: one checkpoint placed on a GPU."""
    profile = load_profile("rtx4090-16k").model_copy(update={"tensor_parallel_size": tp})
    score = ScorePlacement(profile=profile, device="gpu", why="fits")
    placement = Placement(
        checkpoint="awq",
        scheme="awq-w4a16",
        target_plan=None,
        memory_source=source,
        shortfall_gib=None,
        score=score,
    )
    plan = SimpleNamespace(of=lambda name: placement, target=SimpleNamespace(gpu=gpu))
    return SimpleNamespace(plan=SimpleNamespace(placement=plan))


def test_a_gpu_checkpoint_asks_for_its_tensor_parallel_gpus_and_the_target_kind_where_declared() -> None:
    entry, kind = MatrixEntry("awq", "awq-w4a16", None), GPU_RESOURCE.format("rtx4090")
    executor = RayExecutor()
    plain = executor.request(gpu_matrix(2, "vllm-log"), entry, [{"CPU": 8, "GPU": 4}])  # type: ignore[arg-type]
    assert plain == {"num_cpus": 1, "num_gpus": 2}
    declared = [{"CPU": 8, "GPU": 4}, {"CPU": 8, "GPU": 4, kind: 1.0}]
    measured = executor.request(gpu_matrix(1, "vllm-log"), entry, declared)  # type: ignore[arg-type]
    assert measured == {"num_cpus": 1, "num_gpus": 1, "resources": {kind: 0.001}}
    planned = executor.request(gpu_matrix(1, "planner"), entry, declared)  # type: ignore[arg-type]
    assert planned == {"num_cpus": 1, "num_gpus": 1}  # memory from the planner: any GPU node scores it


def test_a_node_that_does_not_see_the_workspace_says_so(tmp_path: Path) -> None:
    matrix = SimpleNamespace(ws=SimpleNamespace(cache=tmp_path))
    entry = MatrixEntry("bf16", "bf16", None)
    with pytest.raises(UserError, match=r"does not see this run's workspace .* put KQE_HOME on storage"):
        run_checkpoint_task(matrix, entry, 1.0, tmp_path / ".ray-probe-0123")  # type: ignore[arg-type]

"""Online or offline items (fast): a hub model scores the full KMMLU and MMLU test splits with every
item by default, the embedded model and model folders stay offline, KQE_OFFLINE=1 wins, the choice is
said up front (dry run included, which contacts nothing), and a hub that does not answer is one line."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from evals.statistics.resolution import FLIP_SHARES, unresolved
from evals.statistics.stats import minimum_detectable_effect
from evals.tasks import benchmark_data
from evals.tasks.benchmark_data import KMMLU_REVISION, MMLU_REVISION
from evals.tasks.item_sets import check_hub, choose
from evals.tasks.prompts import prepare_tasks, source_label, to_download
from kqe.cli import main
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig
from kqe.core.records import ItemChoice
from kqe.core.registry import load_registry, spec_from_local_dir
from kqe.core.workspace import Workspace
from tests.helpers.serve_env import needs_serve_env

REGISTRY = load_registry()
HUB_ENV = ("KQE_ONLINE", "KQE_OFFLINE", "HF_HUB_OFFLINE", "HF_ENDPOINT")


@pytest.fixture(autouse=True)
def no_item_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in HUB_ENV:
        monkeypatch.delenv(variable, raising=False)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture()
def stub_hub() -> Iterator[str]:
    """A loopback endpoint answering every request, as the hub does (404 for what it lacks)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404 if "nothing" in self.path else 200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_the_model_decides_unless_the_flag_or_the_environment_does(
    monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path
) -> None:
    hub, embedded = REGISTRY["qwen2.5-14b"], REGISTRY["gemma3-270m"]
    online = choose(hub, None)
    assert online == ItemChoice(online=True, why="hub model Qwen/Qwen2.5-14B-Instruct")
    assert (online.limit(None), online.limit(0), online.limit(50)) == (None, None, 50)
    offline = choose(embedded, None)
    assert not offline.online and offline.limit(None) == 300 and offline.limit(0) is None
    assert not choose(spec_from_local_dir(tiny_model_dir), None).online
    monkeypatch.setenv("KQE_ONLINE", "1")
    assert choose(embedded, None) == ItemChoice(online=True, why="KQE_ONLINE=1")
    monkeypatch.setenv("KQE_OFFLINE", "1")  # wins over KQE_ONLINE and over a hub model
    assert choose(hub, None) == choose(embedded, None) == ItemChoice(online=False, why="KQE_OFFLINE=1")
    assert choose(hub, True) == ItemChoice(online=True, why="--online")  # the flag is the user's last word
    monkeypatch.setenv("KQE_OFFLINE", "0")
    assert choose(hub, None).why == "KQE_ONLINE=1"


def test_what_the_items_resolve_is_the_mcnemar_mde_at_both_flip_shares() -> None:
    low, high = (100 * minimum_detectable_effect(225, share) for share in FLIP_SHARES)
    assert unresolved(225) == f"differences under ~{low:.0f}–{high:.0f} points cannot be resolved"
    assert 3 < low < 5 and 10 < high < 12  # the committed run's 4.6 (FP8) and 11.4 (4-bit) points
    assert unresolved(35_030) == "differences under ~0.3–0.9 points cannot be resolved"


def eval_cli(home: Path, *args: str, **env: str) -> tuple[int, str]:
    # TQDM_DISABLE in env: the CLI sets it, and CliRunner restores only the variables it was given
    env = {"COLUMNS": "250", "TQDM_DISABLE": "1", "KQE_HOME": str(home), **env}
    result = CliRunner().invoke(main, ["eval", *args], env=env)
    return result.exit_code, result.output


def plan_of(output: str) -> dict:
    return json.loads(output[output.index("{") :])


def test_a_hub_model_plans_every_item_of_the_full_test_splits_without_the_hub(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{closed_port()}"  # a dry run that asked the hub would fail here
    code, out = eval_cli(tmp_path, "--model", "qwen2.5-14b", "--dry-run", "--json", HF_ENDPOINT=nobody)
    assert code == 0, out
    items = plan_of(out)["items"]
    assert (items["online"], items["limit"]) == (True, None)
    assert items["why"] == "hub model Qwen/Qwen2.5-14B-Instruct"
    kmmlu, mmlu = items["tasks"]
    assert (kmmlu["set"], kmmlu["source_items"], kmmlu["scored"]) == ("KMMLU test", 35_030, 35_030)
    assert (mmlu["set"], mmlu["source_items"], mmlu["scored"]) == ("MMLU test", 14_042, 14_042)
    assert kmmlu["download"] == f"HAERAE-HUB/KMMLU@{KMMLU_REVISION}"
    assert mmlu["download"] == f"cais/mmlu@{MMLU_REVISION}"
    assert items["lines"][0] == (
        "KMMLU: full test split (HAERAE-HUB/KMMLU@d61b3f1), 35,030 items — differences under ~0.3–0.9 "
        "points cannot be resolved"
    )
    assert items["lines"][-1] == (
        "items online (hub model Qwen/Qwen2.5-14B-Instruct); KQE_OFFLINE=1 scores the offline sets instead"
    )
    assert items["ko_rag"] == {
        "questions": 40,
        "conditions": ["retrieved", "closed_book"],
        "lengths": ["1k"],
        "data": None,
    }  # the default slice, said after the choice tasks and before what decided their items
    assert items["lines"][2].startswith("ko_rag: 40 questions (seeded) of the built-in set, retrieved at 1k")
    code, out = eval_cli(tmp_path, "--model", "qwen2.5-14b", "--limit", "1000", "--dry-run")
    assert code == 0, out
    assert "KMMLU: full test split (HAERAE-HUB/KMMLU@d61b3f1), 1,000 of 35,030 items sampled" in out


def test_kqe_offline_and_the_embedded_model_plan_the_offline_sets(home_with_sources: Path) -> None:
    code, out = eval_cli(home_with_sources, "--model", "qwen2.5-14b", "--dry-run", "--json", KQE_OFFLINE="1")
    assert code == 0, out
    items = plan_of(out)["items"]
    assert (items["online"], items["why"], items["limit"]) == (False, "KQE_OFFLINE=1", 300)
    kmmlu, mmlu = items["tasks"]
    assert (kmmlu["set"], kmmlu["scored"], kmmlu["download"]) == ("KMMLU-HARD dev", 225, None)
    assert (mmlu["source_items"], mmlu["scored"], mmlu["download"]) == (24, 24, None)  # the fixture's rows
    assert items["lines"][0].startswith("KMMLU: KMMLU-HARD dev (offline), 225 items — differences under ~4–")
    code, out = eval_cli(home_with_sources, "--dry-run", "--json")  # the embedded default model
    assert code == 0, out
    assert plan_of(out)["items"]["online"] is False


@needs_serve_env
def test_an_unreachable_hub_stops_the_run_in_one_line_before_any_work(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    nobody = f"http://127.0.0.1:{closed_port()}"
    args = ("--model", str(tiny_model_dir), "--online", "--schemes", "bf16,w4a16-rtn")
    code, out = eval_cli(tmp_path, *args, HF_ENDPOINT=nobody)
    assert code == 2, out
    error = [line for line in out.splitlines() if line.startswith("kqe: error:")]
    assert len(error) == 1 and "Traceback" not in out
    assert nobody in error[0] and "HAERAE-HUB/KMMLU, cais/mmlu must come from the hub (--online)" in error[0]
    assert "KQE_OFFLINE=1" in error[0]
    assert not (tmp_path / "tasks").exists() and not (tmp_path / "checkpoints").exists()


def test_the_hub_check_accepts_any_answer_and_refuses_silence(
    stub_hub: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    choice = ItemChoice(online=True, why="KQE_ONLINE=1")
    monkeypatch.setenv("HF_ENDPOINT", stub_hub)
    check_hub([f"HAERAE-HUB/KMMLU@{KMMLU_REVISION}"], choice)
    check_hub(["nothing/here@abc"], choice)  # a 404 is an answer: the download says what is wrong
    nobody = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", nobody)
    check_hub([], choice)  # nothing to download (cached items, local copies): nothing asked
    with pytest.raises(UserError) as raised:
        check_hub([f"cais/mmlu@{MMLU_REVISION}"], choice)
    message = str(raised.value)
    assert "\n" not in message and "cais/mmlu must come from the hub (KQE_ONLINE=1)" in message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the libraries read their caches: nothing to ask
    check_hub([f"cais/mmlu@{MMLU_REVISION}"], choice)


def test_the_reproduce_command_says_online_or_offline() -> None:
    online = EvalConfig(model="qwen2.5-14b", items=ItemChoice(online=True, why="x"), limit=None)
    assert "--online --limit 0" in online.command()
    assert "--offline --limit 300" in EvalConfig().command()


def test_a_hub_download_that_fails_is_one_line_and_writes_no_items(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # as if the network went away mid-run
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError) as raised:
        prepare_tasks(workspace, ["mmlu"], 5, seed=0, online=True)
    message = str(raised.value)
    assert "\n" not in message and message.startswith("cannot download cais/mmlu@c30699e from the hub (")
    assert "KQE_OFFLINE=1" in message
    assert to_download(workspace, ["mmlu"], 5, 0, True) == [f"cais/mmlu@{MMLU_REVISION}"]


def test_items_prepared_once_need_the_hub_no_more(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def hub_files(where: object, files: dict[str, str], cache: Path, options: dict) -> dict:
        assert where == f"cais/mmlu@{MMLU_REVISION}"  # the pinned revision, as `datasets` would be asked
        rows = [
            {
                "subject": subject,
                "question": f"{subject} {i}?",
                "choices": list("wxyz"),
                "answer": i % 4,
            }
            for subject in ("anatomy", "virology")
            for i in range(6)
        ]
        return {split: [row | {"question": f"{split}: {row['question']}"} for row in rows] for split in files}

    monkeypatch.setattr(benchmark_data, "load_hub_files", hub_files)
    assert to_download(workspace, ["mmlu"], None, 0, True) == [f"cais/mmlu@{MMLU_REVISION}"]
    prepared = prepare_tasks(workspace, ["mmlu"], None, seed=0, online=True)
    assert source_label("mmlu", prepared) == "MMLU test (cais/mmlu@c30699e, 12 items), 0-shot"
    assert to_download(workspace, ["mmlu"], None, 0, True) == []
    assert to_download(workspace, ["mmlu"], 5, 0, True) == [f"cais/mmlu@{MMLU_REVISION}"]  # another sample

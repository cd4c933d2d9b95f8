"""Hostile input that needs more than one command line (`test_bad_input.py` holds the tables): output
a reader or a terminal must survive, extras that clash or ship code, a taken port, a mistyped home."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evals.reporting.leaderboard import write_leaderboard
from kqe.cli import main
from tests.helpers.cli import assert_one_line_error, invoke_kqe
from tests.helpers.leaderboard_rows import rows

CSV = "leaderboard.csv"


def test_a_bom_leaderboard_reads_like_the_plain_one(cases_dir: Path) -> None:
    from evals.reporting.leaderboard import read_leaderboard

    bom = cases_dir / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (cases_dir / "good.csv").read_bytes())
    assert read_leaderboard(bom) == read_leaderboard(cases_dir / "good.csv")


def test_compare_json_is_valid_json_whatever_the_numbers(tmp_path: Path) -> None:
    sure, never = [0.0, -1e308, -1e308, -1e308], [-1e308, 0.0, -1e308, -1e308]  # KL between them: inf
    paths = []
    for name, logprobs in (("base", (sure, never)), ("cand", (never, sure))):
        lines = [
            {"task": "mmlu", "item_id": f"q{i}", "correct": lp is sure, "gold": 0, "choice_logprobs": lp}
            for i, lp in enumerate(logprobs)
        ]
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    result = CliRunner().invoke(main, ["compare", *map(str, paths), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"bare {name} in JSON"))
    assert report["mmlu"]["mean_kl"] is None  # inf is no number a JSON reader takes


def test_names_from_a_shared_leaderboard_cannot_break_the_report(tmp_path: Path) -> None:
    from evals.reporting.report import write_report

    named = {"checkpoint": "<img src=x>|evil", "calibration": "a\nb"}
    hostile = [r.model_copy(update=named) if r.scheme == "fp8-dynamic" else r for r in rows()]
    board = tmp_path / "gemma3-270m" / CSV
    write_leaderboard(board, hostile)
    text = write_report(board).read_text(encoding="utf-8")
    assert "<img" not in text and "&lt;img src=x&gt;\\|evil" in text
    table: list[int] = []  # unescaped `|` per line of each Markdown table: equal within a table
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            table.append(len(re.findall(r"(?<!\\)\|", line)))
        elif table:
            assert len(set(table)) == 1, table
            table = []


def test_escape_sequences_in_an_input_file_never_reach_the_terminal(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO \x1b]0;owned\x07 starting\n\x1b[31mtorch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 2.00 GiB. GPU 0 has a total capacity of 23.64 GiB of which 1.00 GiB is free.\x1b[0m\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["doctor", str(log)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "out of memory" in result.output


def test_two_extras_with_one_folder_name_are_refused_before_any_build(
    cases_dir: Path, tiny_model_dir: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for side in ("a", "b"):
        shutil.copytree(tiny_model_dir, cases_dir / side / "same", dirs_exist_ok=True)
    both = f"{cases_dir}/a/same,{cases_dir}/b/same"
    result = invoke_kqe(
        monkeypatch,
        home_with_sources,
        cases_dir,
        ["eval", "--model", str(tiny_model_dir), "--extra", both, "--dry-run"],
    )
    assert_one_line_error(result, "repeats a checkpoint name")


def test_an_extra_shipping_code_needs_trust_like_the_base(
    cases_dir: Path, tiny_model_dir: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = cases_dir / "extra-with-code"
    shutil.copytree(tiny_model_dir, folder, dirs_exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoModel": "evil.Model"}}))
    args = ["eval", "--model", str(tiny_model_dir), "--extra", str(folder), "--dry-run"]
    assert_one_line_error(
        invoke_kqe(monkeypatch, home_with_sources, cases_dir, args), "extra-with-code", "auto_map"
    )
    trusted = invoke_kqe(monkeypatch, home_with_sources, cases_dir, [*args, "--trust-remote-code"])
    assert trusted.exit_code == 0, trusted.output


def test_a_taken_kqe_port_is_said_before_any_build(
    cases_dir: Path, tiny_model_dir: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("KQE_PORT", str(taken.getsockname()[1]))
        result = invoke_kqe(
            monkeypatch, home_with_sources, cases_dir, ["eval", "--model", str(tiny_model_dir), "--dry-run"]
        )
    assert_one_line_error(result, "KQE_PORT", "not free")


def test_a_mistyped_kqe_home_is_named(cases_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke_kqe(
        monkeypatch, cases_dir / "no-such-home", cases_dir, ["eval"]
    )  # nothing installed there
    assert_one_line_error(result, "gemma3-270m", "KQE_HOME=", "no-such-home")

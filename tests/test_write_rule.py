"""The write rule: kqe writes and deletes only its own files, never through a symbolic link.

Each damaging case runs in a temporary tree whose links point outside it, and checks that the
outside files are intact byte for byte (and that nothing new appeared there).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evals.reporting.leaderboard import write_leaderboard
from evals.reporting.report import write_report
from evals.serving.serve import VllmServer, local_profile
from kqe.commands.console import run_guarded
from kqe.commands.report import report_command
from kqe.core.errors import UserError
from kqe.core.io import open_writable, owned_folder, write_atomic, write_record
from kqe.core.workspace import Workspace
from tests.helpers.cli import assert_one_line_error, invoke_kqe
from tests.helpers.leaderboard_rows import rows, run_summary, write_board


def outside_tree(tmp_path: Path) -> tuple[Path, dict[Path, bytes]]:
    """A folder outside the results tree, with files whose bytes the test checks afterwards."""
    outside = tmp_path / "outside"
    outside.mkdir()
    files = {
        outside / "keep.md": b"# mine\n",
        outside / "keep.png": b"\x89PNG mine",
        outside / "a.log": b"A\n",
    }
    for path, data in files.items():
        path.write_bytes(data)
    return outside, files


def assert_intact(outside: Path, files: dict[Path, bytes]) -> None:
    assert sorted(outside.iterdir()) == sorted(files)
    for path, data in files.items():
        assert path.read_bytes() == data, path


@pytest.fixture
def board(tmp_path: Path) -> Path:
    return write_board(tmp_path)


def test_report_deletes_only_the_cards_and_plots_it_wrote(board: Path) -> None:
    mine = {board.parent / "cards" / "my-notes.md": b"notes", board.parent / "plots" / "mine.png": b"png"}
    for path, data in mine.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    write_report(board)
    fewer = [r for r in rows() if r.checkpoint != "awq-w4a16-en"]
    write_leaderboard(board, fewer)
    write_record(board.parent / "run.json", run_summary(fewer))
    write_report(board)
    assert not (board.parent / "cards" / "awq-w4a16-en.md").exists()  # its own stale card: gone
    for path, data in mine.items():  # the user's files: untouched
        assert path.read_bytes() == data


def test_a_forged_list_of_written_files_deletes_nothing_outside(board: Path, tmp_path: Path) -> None:
    outside, files = outside_tree(tmp_path)
    escape = os.path.relpath(outside / "keep.md", board.parent / "cards")
    (board.parent / ".report-files.json").write_text(f'["cards/{escape}", "../outside/keep.png"]')
    write_report(board)
    assert_intact(outside, files)


@pytest.mark.parametrize("folder", ["cards", "plots"])
def test_report_refuses_a_linked_output_folder(board: Path, tmp_path: Path, folder: str) -> None:
    outside, files = outside_tree(tmp_path)
    (board.parent / folder).symlink_to(outside, target_is_directory=True)
    result = CliRunner().invoke(report_command, ["--leaderboard", str(board)])
    assert_one_line_error(result, f"{board.parent / folder} is a symbolic link", "remove the link")
    assert_intact(outside, files)


def test_a_linked_server_log_or_pid_file_is_refused_before_anything_runs(
    tmp_path: Path, tiny_model_dir: Path, workspace: Workspace
) -> None:
    outside, files = outside_tree(tmp_path)
    logs = tmp_path / "results" / "tiny" / "logs"
    logs.mkdir(parents=True)
    for name in ("tiny.abc.log", "tiny.abc.pid"):
        link = logs / name
        link.symlink_to(outside / "a.log")
        server = VllmServer(
            tiny_model_dir, "tiny", local_profile("cpu-ci", workspace), workspace, logs / "tiny.abc.log"
        )
        with pytest.raises(UserError, match=f"{link} is a symbolic link"):
            server.start()
        assert server.pid is None
        link.unlink()
    assert_intact(outside, files)


def test_a_file_where_an_output_folder_belongs_is_one_line(board: Path) -> None:
    (board.parent / "plots").write_bytes(b"mine")
    result = CliRunner().invoke(report_command, ["--leaderboard", str(board)])
    assert_one_line_error(result, f"cannot make the folder {board.parent / 'plots'}")
    assert (board.parent / "plots").read_bytes() == b"mine"


def test_report_writes_only_into_a_folder_of_kqe_or_the_out_folder(tmp_path: Path) -> None:
    mine = tmp_path / "my-notes"
    mine.mkdir()
    write_leaderboard(mine / "leaderboard.csv", rows())
    (mine / "report.md").write_bytes(b"# my own report\n")
    before = {path: path.read_bytes() for path in mine.iterdir()}
    refused = CliRunner().invoke(report_command, ["--leaderboard", str(mine / "leaderboard.csv")])
    assert_one_line_error(refused, "not in a run folder of kqe", "--out DIR")
    out = tmp_path / "report-out"
    for _ in range(2):  # a new folder, then the folder kqe wrote its report into
        done = CliRunner().invoke(
            report_command, ["--leaderboard", str(mine / "leaderboard.csv"), "--out", str(out)]
        )
        assert done.exit_code == 0, done.output
    assert (out / "report.md").is_file() and sorted(p.name for p in out.iterdir())[0] == ".report-files.json"
    assert {path: path.read_bytes() for path in mine.iterdir()} == before  # nothing added, nothing replaced


def test_report_never_replaces_a_report_md_it_did_not_write(board: Path) -> None:
    theirs = board.parent / "report.md"
    theirs.write_bytes(b"# written by hand\n")
    result = CliRunner().invoke(report_command, ["--leaderboard", str(board)])
    assert_one_line_error(result, f"{theirs} was not written by kqe", "--out DIR")
    assert theirs.read_bytes() == b"# written by hand\n"
    assert not (board.parent / "plots").exists() and not (board.parent / "cards").exists()
    theirs.unlink()
    for _ in range(2):  # its own report.md, recorded by the .report-files.json beside it, is replaced
        done = CliRunner().invoke(report_command, ["--leaderboard", str(board)])
        assert done.exit_code == 0, done.output


TINY = ("--model", "{tiny}")
LINKED_FOLDERS = {
    "calibrate": ("calibration_data/tiny-llama", ("calibrate", *TINY, "--seq-len", "64")),
    "quantize": ("{home}/checkpoints/tiny-llama", ("quantize", *TINY, "--scheme", "w4a16-rtn")),
    "quantize-awq": ("calibration_data/tiny-llama", ("quantize", *TINY, "--scheme", "awq-w4a16")),
    "eval-results": ("results/tiny-llama", ("eval", *TINY, "--dry-run")),
    "eval-checkpoints": ("{home}/checkpoints/tiny-llama", ("eval", *TINY, "--dry-run")),
    "eval-calibration": ("calibration_data/tiny-llama", ("eval", *TINY, "--dry-run")),
}  # fmt: skip
"""A folder kqe writes for the model, made a link to a folder outside, and a command that would write
there: the link named, nothing written, before any work."""


@pytest.mark.parametrize(("linked", "args"), LINKED_FOLDERS.values(), ids=list(LINKED_FOLDERS))
def test_a_linked_folder_below_a_root_is_refused_before_any_work(
    linked: str,
    args: tuple[str, ...],
    tmp_path: Path,
    tiny_model_dir: Path,
    home_with_sources: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outside, files = outside_tree(tmp_path)
    home, project = tmp_path / "home", tmp_path / "project"
    shutil.copytree(home_with_sources, home)
    project.mkdir()
    link = Path(linked.replace("{home}", str(home)))
    link = link if link.is_absolute() else project / link
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside, target_is_directory=True)
    filled = [arg.replace("{tiny}", str(tiny_model_dir)) for arg in args]
    result = invoke_kqe(monkeypatch, home, project, filled)
    assert_one_line_error(result, f"{link} is a symbolic link", "remove the link")
    assert_intact(outside, files)


def test_a_link_deeper_below_a_root_is_refused_and_the_roots_may_be_links(tmp_path: Path) -> None:
    outside, files = outside_tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "results").mkdir(parents=True)
    (elsewhere / "home").mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "results").symlink_to(elsewhere / "results", target_is_directory=True)
    (tmp_path / "home").symlink_to(elsewhere / "home", target_is_directory=True)
    ws = Workspace(root=project, cache=tmp_path / "home", serve_venv=tmp_path / "venv")
    write_atomic(ws.results("m") / "run.json", "{}")  # through the linked roots: the user's choice
    write_atomic(ws.checkpoints("m") / "bf16-x.json", "{}")
    assert (elsewhere / "results" / "m" / "run.json").is_file()
    assert (elsewhere / "home" / "checkpoints" / "m" / "bf16-x.json").is_file()
    (ws.results("m") / "items").symlink_to(outside, target_is_directory=True)
    (ws.checkpoints("m") / "w4a16-rtn-x").symlink_to(outside, target_is_directory=True)
    items, build = ws.results("m") / "items", ws.checkpoints("m") / "w4a16-rtn-x"
    writes = [
        (items, lambda: write_atomic(items / "bf16.jsonl", "x")),
        (items, lambda: write_atomic(items / "deeper" / "bf16.jsonl", "x")),
        (build, lambda: open_writable(build / "build.log")),
        (build, lambda: owned_folder(build / "sub" / "deeper")),
    ]
    for link, write in writes:
        with pytest.raises(UserError, match="remove the link") as refused:
            write()
        assert str(refused.value).startswith(f"{link} is a symbolic link")
    assert_intact(outside, files)


def test_writes_refuse_a_link_at_the_file(tmp_path: Path) -> None:
    outside, files = outside_tree(tmp_path)
    (tmp_path / "run.json").symlink_to(outside / "a.log")
    (tmp_path / "build.log").symlink_to(outside / "a.log")
    with pytest.raises(UserError, match="symbolic link"):
        write_atomic(tmp_path / "run.json", "{}")
    with pytest.raises(UserError, match="symbolic link"):
        open_writable(tmp_path / "build.log")
    assert_intact(outside, files)


@pytest.mark.parametrize(
    "text", ["[/x] closes nothing", "a [bold]tag[/bold] and [link=x]", "\x1b[2J\x1b]0;pwned\x07"]
)
def test_error_text_is_printed_literally_without_control_sequences(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def fail() -> None:
        raise UserError(f"model {text}: not found")

    with pytest.raises(SystemExit) as stop:
        run_guarded(fail)
    assert stop.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "\x1b" not in line and "\x07" not in line
    shown = text.replace("\x1b[2J", "").replace("\x1b]0;pwned\x07", "")
    assert f"kqe: error: model {shown}: not found" == line


def test_the_internal_error_handler_survives_an_unwritable_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    home.write_text("a file where the cache folder should be")  # nothing can be written under it
    monkeypatch.setenv("KQE_HOME", str(home))

    def bug() -> None:
        raise RuntimeError("[/x] a bug")

    with pytest.raises(SystemExit) as stop:
        run_guarded(bug)
    assert stop.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError: [/x] a bug" in err  # the traceback went to stderr
    assert err.splitlines()[-1].startswith("kqe: internal error: RuntimeError: [/x] a bug (traceback above")

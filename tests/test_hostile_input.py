"""Hostile and malformed input to every subcommand, in process: exit 2, one line naming the input.

The cases are files a user may pass by mistake or receive from someone else: not UTF-8, binary,
of the wrong kind, truncated, with NaN, duplicated rows, links, folders where files belong. None
may exit 1 (an internal error) or print a traceback. `test_cli_errors.py` runs a smaller set through
the real entry point in a subprocess.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from evals.reporting.leaderboard import write_leaderboard
from evals.reporting.leaderboard_row import LEADERBOARD_SCHEMA_VERSION as NOW
from kqe.cli import main
from tests.conftest import REPO
from tests.test_report import rows

CSV = "leaderboard.csv"


def write_cases(root: Path, tiny: Path) -> None:
    """Every bad file the cases below name, under `root`."""
    good = root / "good.csv"
    write_leaderboard(good, rows())
    text = good.read_text(encoding="utf-8")
    header, first, *rest = text.splitlines()
    files: dict[str, str | bytes] = {
        "binary.csv": bytes(range(256)) * 4,
        "latin1.csv": text.replace("—", "-").replace("inconclusive", "inconclusivé").encode("latin-1"),
        "nul.csv": text[:200] + "\0" + text[200:],
        "empty.csv": "",
        "header-only.csv": header + "\n",
        "not-csv.csv": '{"a": 1}\n',
        "dup-row.csv": "\n".join([header, first, first, *rest]) + "\n",
        "nan-ci.csv": text.replace("-0.06,-0.04", "nan,nan", 1)
        if "-0.06,-0.04" in text
        else text.replace(",0.5,", ",nan,", 1),
        "inf-cell.csv": text.replace(",0.5,", ",inf,", 1),
        "word-in-number.csv": text.replace(",0.5,", ",half,", 1),
        "mixed-schema.csv": "\n".join(
            [header, first, *(line.replace(f"{NOW},", f"{NOW - 1},", 1) for line in rest)]
        )
        + "\n",
        "short-row.csv": "\n".join([header, first[: len(first) // 2], *rest]) + "\n",
        "long-row.csv": "\n".join([header, first + ",x,y", *rest]) + "\n",
        "other-model.csv": text + first.replace("gemma3-270m", "qwen2.5-7b", 1) + "\n",
        "bad.jsonl": b"\xff\xfe\x00binary",
        "not-items.jsonl": '{"task": "mmlu"}\n{"task": "mmlu"}\n',
        "nan-items.jsonl": '{"task": "mmlu", "item_id": "a", "correct": NaN}\n',
        "array.jsonl": "[1, 2, 3]\n[4]\n",
        "empty.jsonl": "",
        "binary.log": bytes(range(256)) * 64,
        "latin1.log": "CUDA out of memory. Tried to allocate 2.00 GiB é".encode("latin-1"),
        "recipes-binary.toml": b"\x00\x01\x02",
        "recipes-latin1.toml": '[mine]\nscheme = "awq-w4a16"\nnote = "é"\n'.encode("latin-1"),
        "recipes-wrong-type.toml": '[mine]\nscheme = "awq-w4a16"\ngroup_size = "big"\n',
        "recipes-not-table.toml": "mine = 3\n",
        "recipes-bad-syntax.toml": "[mine\nscheme=",
    }
    for name, data in files.items():
        path = root / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    (root / "a-folder.csv").mkdir()
    (root / "dangling.csv").symlink_to(root / "nowhere.csv")
    model = root / "broken-config"
    shutil.copytree(tiny, model)
    (model / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": "many"', encoding="utf-8"
    )
    model = root / "config-not-object"
    shutil.copytree(tiny, model)
    (model / "config.json").write_text("[1, 2]", encoding="utf-8")
    model = root / "config-binary"
    shutil.copytree(tiny, model)
    (model / "config.json").write_bytes(b"\xff\xfe\x00")
    extra = root / "extra-broken-json"
    shutil.copytree(tiny, extra)
    (extra / "config.json").write_text("{not json", encoding="utf-8")
    rag = root / "rag-broken"
    rag.mkdir()
    (rag / "docs.jsonl").write_text("{not json\n", encoding="utf-8")
    (rag / "questions.jsonl").write_text("", encoding="utf-8")
    (root / "rag-missing").mkdir()


BOARD_INPUTS = [
    "binary.csv", "latin1.csv", "nul.csv", "empty.csv", "header-only.csv", "not-csv.csv", "dup-row.csv",
    "nan-ci.csv", "inf-cell.csv", "word-in-number.csv", "mixed-schema.csv", "short-row.csv", "long-row.csv",
    "a-folder.csv", "dangling.csv", "missing.csv",
]  # fmt: skip

ITEM_FILES = (
    "bad.jsonl", "not-items.jsonl", "nan-items.jsonl", "array.jsonl", "empty.jsonl", "a-folder.csv",
    "missing.jsonl",
)  # fmt: skip
RECIPE_FILES = (
    "recipes-binary.toml", "recipes-latin1.toml", "recipes-wrong-type.toml", "recipes-not-table.toml",
    "recipes-bad-syntax.toml", "a-folder.csv", "missing.toml",
)  # fmt: skip
GOOD = ("--leaderboard", "{d}/good.csv", "--gpu", "rtx4090")
PLAN = ("plan", "--model", "gemma3-270m", "--gpu", "rtx4090")


def dry_run(*args: str) -> tuple[str, ...]:
    """`kqe eval --dry-run` of the tiny model: every check that needs no build runs, nothing is built."""
    return ("eval", "--model", "{tiny}", *args, "--dry-run")


CASES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    *[(("choose", "--leaderboard", f"{{d}}/{name}", "--gpu", "rtx4090"), (name,)) for name in BOARD_INPUTS],
    *[(("diff", f"{{d}}/{name}", "{d}/good.csv"), (name,)) for name in BOARD_INPUTS],
    *[(("report", "--leaderboard", f"{{d}}/{name}"), (name,)) for name in BOARD_INPUTS],
    (("report", "--leaderboard", "{d}/other-model.csv"), ("other-model.csv", "models")),
    (("choose", *GOOD, "--max-loss", "nan"), ("--max-loss",)),
    (("choose", *GOOD, "--max-loss", "-1"), ("--max-loss",)),
    (("choose", *GOOD, "--task", "hellaswag"), ("hellaswag",)),
    (("choose", *GOOD, "--count", "0"), ("--count",)),
    (("choose", *GOOD, "--min-concurrency", "inf"), ("inf",)),
    (("choose", *GOOD, "--model", "nope"), ("nope",)),
    *[(("compare", f"{{d}}/{name}", "{d}/not-items.jsonl"), (name,)) for name in ITEM_FILES],
    (("compare", "{d}/not-items.jsonl", "{d}/not-items.jsonl", "--margin", "nan"), ("--margin",)),
    (("compare", "{d}/not-items.jsonl", "{d}/not-items.jsonl", "--margin", "-5"), ("--margin",)),
    *[(("doctor", f"{{d}}/{name}"), (name,)) for name in ("a-folder.csv", "missing.log", "dangling.csv")],
    (("doctor", "{d}/binary.log", "--profile", "rtx9090"), ("rtx9090",)),
    *[(("plan", "--model", f"{{d}}/{name}", "--gpu", "rtx4090"), (name, "config.json"))
      for name in ("broken-config", "config-not-object", "config-binary")],
    (("plan", "--model", "gemma3-270m", "--gpu-gib", "nan"), ("--gpu-gib",)),
    (("plan", "--model", "gemma3-270m", "--gpu-gib", "-3"), ("--gpu-gib",)),
    ((*PLAN, "--max-model-len", "0"), ("--max-model-len",)),
    ((*PLAN, "--max-num-seqs", "-1"), ("--max-num-seqs",)),
    ((*PLAN, "--kv-cache-dtype", "fp3"), ("fp3",)),
    ((*PLAN, "--kv-cache-gib", "nan"), ("--kv-cache-gib",)),
    ((*PLAN, "--profile", "nope"), ("nope",)),
    (("plan", "--model", "gemma3-270m"), ("--gpu",)),
    *[(dry_run("--recipes", f"{{d}}/{name}", "--schemes", "bf16,mine"), (name,)) for name in RECIPE_FILES],
    (dry_run("--extra", "{d}/missing-extra"), ("missing-extra",)),
    (dry_run("--extra", "hf:org/name"), ("hf:org/name", "revision")),
    (dry_run("--extra", "{d}/extra-broken-json"), ("extra-broken-json", "config.json")),
    (dry_run("--extra", "{d}/broken-config,{d}/x/broken-config"), ("broken-config",)),
    (dry_run("--rag-data", "{d}/rag-missing", "--tasks", "ko_rag"), ("rag-missing",)),
    (dry_run("--rag-data", "{d}/rag-broken", "--tasks", "ko_rag"), ("rag-broken",)),
    (("eval", "--model", "{d}/broken-config", "--dry-run"), ("broken-config", "config.json")),
    (("eval", "--model", "{d}/config-binary", "--dry-run"), ("config-binary", "config.json")),
    (dry_run("--limit", "-1"), ("--limit",)),
    (("eval", "--model", "{tiny}", "--seed", "x"), ("--seed",)),
    (dry_run("--schemes", ""), ("--schemes",)),
    (dry_run("--calibration", ","), (",",)),
    (dry_run("--tasks", ",,"), ("--tasks",)),
    (dry_run("--run", "a/b"), ("a/b",)),
    (dry_run("--gpu-gib", "0"), ("--gpu-gib",)),
    (("eval", "--model", "", "--dry-run"), ("--model",)),
    (("eval", "--model", "hf:org/name@", "--dry-run"), ("hf:org/name@",)),
    (("calibrate", "--model", "{tiny}", "--out", "{d}/good.csv"), ("good.csv",)),
    (("calibrate", "--model", "{tiny}", "--samples", "0"), ("samples",)),
    (("calibrate", "--model", "{tiny}", "--sources", "nope"), ("nope",)),
    (("calibrate", "--model", "{tiny}", "--tasks", "hellaswag"), ("hellaswag",)),
    (("quantize", "--model", "{tiny}"), ("--scheme", "--extra")),
    (("quantize", "--model", "{tiny}", "--scheme", "w4a16-rtn", "--set", "group_size"), ("group_size",)),
    (("quantize", "--model", "{tiny}", "--scheme", "w4a16-rtn", "--set", "nope=1"), ("nope",)),
    (("quantize", "--model", "{tiny}", "--extra", "{d}/extra-broken-json"), ("extra-broken-json",)),
    (("quantize", "--model", "{tiny}", "--scheme", "mine", "--recipes", "{d}/recipes-binary.toml"),
     ("recipes-binary.toml",)),
    (("load", "--url", "not a url"), ("not a url",)),
    (("load", "--model", "{tiny}", "--prompt-tokens", "0"), ("--prompt-tokens",)),
    (("load", "--model", "{tiny}", "--max-tokens", "0"), ("--max-tokens",)),
    (("load", "--model", "{tiny}", "--checkpoint-dir", "{d}/a-folder.csv"), ("a-folder.csv",)),
    (("load", "--model", "{tiny}", "--profile", "nope"), ("nope",)),
    (("models", "extra-arg"), ("extra-arg",)),
]  # fmt: skip


@pytest.fixture(scope="module")
def cases_dir(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    write_cases(root, tiny_model_dir)
    return root


@pytest.mark.parametrize(("args", "needles"), CASES, ids=[" ".join(a[:4]) for a, _ in CASES])
def test_hostile_input_is_one_line_naming_it(
    args: tuple[str, ...], needles: tuple[str, ...], cases_dir: Path, tiny_model_dir: Path,
    home_with_sources: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    filled = [arg.replace("{d}", str(cases_dir)).replace("{tiny}", str(tiny_model_dir)) for arg in args]
    assert_one_line(invoke(monkeypatch, home_with_sources, cases_dir, filled), *needles)


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
    result = invoke(
        monkeypatch,
        home_with_sources,
        cases_dir,
        ["eval", "--model", str(tiny_model_dir), "--extra", both, "--dry-run"],
    )
    assert_one_line(result, "repeats a checkpoint name")


def test_an_extra_shipping_code_needs_trust_like_the_base(
    cases_dir: Path, tiny_model_dir: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = cases_dir / "extra-with-code"
    shutil.copytree(tiny_model_dir, folder, dirs_exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"auto_map": {"AutoModel": "evil.Model"}}))
    args = ["eval", "--model", str(tiny_model_dir), "--extra", str(folder), "--dry-run"]
    assert_one_line(invoke(monkeypatch, home_with_sources, cases_dir, args), "extra-with-code", "auto_map")
    trusted = invoke(monkeypatch, home_with_sources, cases_dir, [*args, "--trust-remote-code"])
    assert trusted.exit_code == 0, trusted.output


def test_a_taken_kqe_port_is_said_before_any_build(
    cases_dir: Path, tiny_model_dir: Path, home_with_sources: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setenv("KQE_PORT", str(taken.getsockname()[1]))
        result = invoke(
            monkeypatch, home_with_sources, cases_dir, ["eval", "--model", str(tiny_model_dir), "--dry-run"]
        )
    assert_one_line(result, "KQE_PORT", "not free")


def test_a_mistyped_kqe_home_is_named(cases_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke(monkeypatch, cases_dir / "no-such-home", cases_dir, ["eval"])  # nothing installed there
    assert_one_line(result, "gemma3-270m", "KQE_HOME=", "no-such-home")


def invoke(monkeypatch: pytest.MonkeyPatch, home: Path, cwd: Path, args: list[str]) -> Result:
    monkeypatch.setenv("KQE_HOME", str(home))
    monkeypatch.setenv("KQE_SERVE_VENV", str(REPO / ".venv-serve"))
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, args)


def assert_one_line(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kqe: error:"), result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]

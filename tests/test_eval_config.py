"""`EvalConfig` is the one record of a run's configuration: `kqe eval` has an option per field, whose help
is the field's docstring, each comma list is parsed once by its field, `command()` parses back to the
same config through the real CLI, and every committed run.json reads it typed."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import click
import pytest

from kqe.commands.eval import CLI_ONLY, eval_command, eval_config
from kqe.core import defaults
from kqe.core.errors import UserError
from kqe.core.eval_config import EvalConfig, option_help, option_name
from kqe.core.records import ItemChoice
from kqe.core.results import RunSummary

REPO = Path(__file__).resolve().parents[1]

CHANGED: dict[str, Any] = {
    "model": "qwen2.5-14b",
    "schemes": ("bf16", "w4a16-rtn"),
    "calibrations": ("ko100", "ko=0.6,en=0.4"),
    "calib_samples": 7,
    "calib_seq_len": 99,
    "tasks": ("mmlu", "ko_rag", "lm-eval:kobest_copa"),
    "items": ItemChoice(online=True, why="--online"),
    "limit": None,
    "profile": "rtx4090-16k",
    "seed": 7,
    "concurrency": 3,
    "target_gpu": "rtx4090",
    "gpu_gib": 23.123456789,
    "score_profile": "cpu-ci",
    "load": True,
    "load_duration_s": 12.5,
    "rag_data": "/data/my rag's folder",
    "rag_conditions": ("oracle", "depth"),
    "rag_lengths": ("2k", "16k"),
    "rag_questions": 12,
    "circular": 3,
    "kv_cache_dtypes": ("auto", "fp8"),
    "kv_checkpoints": ("bf16",),
    "rag_chat_template": True,
    "apply_chat_template": True,
    "include_path": "/tasks/yaml",
    "trust_remote_code": True,
    "recipes": "my recipes.toml",
    "extra": ("/models/a", "hf:org/x@1"),
    "multiplicity": "bh",
    "ppl_margin_pct": 2.5,
    "run": "mine",
}
"""A value other than the default for every field of EvalConfig."""


def _options() -> dict[str, click.Option]:
    return {p.name: p for p in eval_command.params if isinstance(p, click.Option) and p.name is not None}


def _field_of(option: str) -> str:
    return "items" if option == "online" else option


def test_every_option_of_kqe_eval_sets_a_field_and_every_field_has_its_option() -> None:
    config_options = {name: option for name, option in _options().items() if name not in CLI_ONLY}
    assert {_field_of(name) for name in config_options} == set(EvalConfig.model_fields)
    for name, option in config_options.items():
        assert option_name(_field_of(name)) in option.opts, f"command() spells --{name} as kqe eval does"
        assert option.help, f"--{name} has help"
    assert set(CLI_ONLY) <= set(_options()), "CLI_ONLY names options kqe eval has"


def test_every_option_of_kqe_eval_says_its_fields_docstring() -> None:
    for name, option in _options().items():
        if name not in CLI_ONLY:
            assert option.help == option_help(_field_of(name)), f"--{name}'s help is its field's docstring"
    helps = [option.help for name, option in _options().items() if name not in CLI_ONLY]
    assert len(set(helps)) == len(helps), "no two options share a help"


def test_an_options_help_is_its_docstring_on_one_line_without_code_marks() -> None:
    docstring = EvalConfig.model_fields["calibrations"].description
    assert docstring is not None and "\n" in docstring and "`ko70`" in docstring
    shown = option_help("calibrations")
    assert shown.startswith("Calibration mixes, comma-separated: ko100, ko70, en100, or shares such as")
    assert "\n" not in shown and "`" not in shown and "  " not in shown
    assert shown.split() == docstring.replace("`", "").split(), "every word of the docstring is kept"


def test_the_defaults_kqe_eval_decides_are_in_its_help() -> None:
    text = eval_command.get_help(click.Context(eval_command))
    limit = f"every item online, {defaults.LIMIT} offline"
    for said in (limit, "online for a hub model or KQE_ONLINE=1", "on with a GPU, off on CPU"):
        assert said in " ".join(text.split()), f"kqe eval --help says its default: {said}"


def test_every_field_has_a_changed_value_here() -> None:
    assert set(CHANGED) == set(EvalConfig.model_fields), "a new field needs a value in CHANGED"
    assert all(EvalConfig.model_fields[name].default != value for name, value in CHANGED.items())


def _parsed(command: str) -> EvalConfig:
    """`command` as `kqe eval` reads it: the real click command parses it, nothing runs."""
    words = shlex.split(command)
    assert words[:2] == ["kqe", "eval"]
    options = dict(eval_command.make_context("eval", words[2:]).params)
    for name in CLI_ONLY:
        options.pop(name)
    return eval_config(options)


def _assert_round_trip(cfg: EvalConfig) -> None:
    back = _parsed(cfg.command())
    assert back.items.online == cfg.items.online  # why it is online is the flag's, given back
    assert back.model_copy(update={"items": cfg.items}) == cfg


NEEDS: dict[str, dict[str, Any]] = {"score_profile": {"target_gpu": "rtx4090"}}
"""Fields `kqe eval` takes only beside another (a scoring profile is for a target's checkpoints)."""


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_the_reproduce_command_parses_back_to_the_config_for_every_field(field: str) -> None:
    _assert_round_trip(EvalConfig(**{field: CHANGED[field], **NEEDS.get(field, {})}))


def test_the_reproduce_command_parses_back_with_every_field_changed_and_with_none() -> None:
    # --target-gpu and --gpu-gib both say the target's memory: the CLI takes one of them
    _assert_round_trip(EvalConfig(**(CHANGED | {"gpu_gib": None})))
    _assert_round_trip(EvalConfig(**(CHANGED | {"target_gpu": None})))
    _assert_round_trip(EvalConfig())
    _assert_round_trip(EvalConfig(load=True))  # said at its default too: the CLI's depends on the machine


def test_the_reproduce_command_keeps_its_shape() -> None:
    assert EvalConfig().command() == (
        "kqe eval --model gemma3-270m --schemes bf16,awq-w4a16,w4a16-rtn,fp8-dynamic "
        "--calibration ko70,en100 --calib-samples 48 --calib-seq-len 384 --tasks kmmlu,mmlu,ko_rag --offline "
        "--limit 300 --profile cpu-small --seed 1234 --no-load --rag-conditions retrieved,closed_book "
        "--rag-lengths 1k --rag-questions 40"
    )
    assert "--rag" not in EvalConfig(tasks="kmmlu").command(), "the slice is said only when ko_rag is scored"
    assert "--concurrency 2" in EvalConfig(concurrency=2).command()


@pytest.mark.parametrize(
    ("fields", "needles"),
    [
        ({"schemes": " , "}, ("--schemes", "names no scheme")),
        ({"calibrations": ","}, ("calibration ','", "names no mix")),
        ({"rag_conditions": "retrieved,orcale"}, ("--rag-conditions", "orcale", "retrieved,oracle,depth")),
        ({"rag_conditions": ","}, ("--rag-conditions", "names no condition")),
        ({"rag_conditions": ("closed_book", "depht")}, ("depht",)),
        ({"rag_lengths": "1k,3k"}, ("--rag-lengths", "3k", "1k,2k,4k,16k")),
        ({"rag_lengths": ""}, ("--rag-lengths", "names no length")),
        ({"rag_questions": -3}, ("--rag-questions", "-3", "0 for every question")),
        ({"circular": -2}, ("--circular", "-2", "0 for no CircularEval")),
        ({"circular": "1.5"}, ("--circular", "1.5", "whole number")),
        ({"run": "../elsewhere"}, ("../elsewhere", "plain folder name")),
        ({"kv_cache_dtypes": "auto,fp4"}, ("--kv-cache-dtypes", "'fp4'", "fp8_e5m2")),
        ({"kv_cache_dtypes": "fp8,fp8"}, ("--kv-cache-dtypes", "twice")),
    ],
)
def test_a_bad_value_is_one_line_naming_it(fields: dict[str, Any], needles: tuple[str, ...]) -> None:
    with pytest.raises(UserError) as raised:
        EvalConfig(**fields)
    assert "\n" not in str(raised.value) and all(needle in str(raised.value) for needle in needles)


def test_comma_lists_are_parsed_once_into_tuples() -> None:
    cfg = EvalConfig(
        schemes="bf16, awq-w4a16,,",
        calibrations="ko70,ko=0.6,en=0.4",
        tasks="mmlu",
        extra="",
        rag_conditions="closed_book,retrieved",
        rag_lengths="4k, 1k",
        run="",
        target_gpu="",
    )
    assert cfg.schemes == ("bf16", "awq-w4a16") and cfg.calibrations == ("ko70", "ko=0.6,en=0.4")
    assert cfg.tasks == ("mmlu",) and cfg.extra == ()
    assert cfg.rag_conditions == ("retrieved", "closed_book"), "in the order they are scored"
    assert cfg.rag_lengths == ("1k", "4k"), "shortest first, as the leaderboard's columns"
    assert cfg.run is None and cfg.target_gpu is None


RUN_FILES = sorted([*(REPO / "results").glob("*/run.json"), *(REPO / "results").glob("*/runs/*/run.json")])


@pytest.mark.parametrize("path", RUN_FILES, ids=[str(p.relative_to(REPO)) for p in RUN_FILES])
def test_every_committed_run_json_reads_its_config_typed(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))["config"]
    config = RunSummary.model_validate_json(path.read_text(encoding="utf-8")).config
    assert isinstance(config, EvalConfig)
    written = config.model_dump(mode="json")
    assert {name: written[name] for name in raw} == raw, "each field written reads back as it was"

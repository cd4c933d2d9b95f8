"""Calibration sets on hand-made sources, cut with the tiny model's real byte-level BPE tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from kqe.errors import UserError
from kqe.workspace import Workspace
from quantize.calibration import (
    NAMED_MIXES,
    SourceSpec,
    build_calibration_set,
    default_sources,
    holdout_sources,
    load_catalog,
    parse_mix,
)

HOLDOUT_MARK = "보류문장"
SEQ_LEN = 64


def _korean(count: int) -> str:
    return "\n\n".join(
        f"제{i}조 모든 국민은 법 앞에 평등하다. 국가는 {i}번째 의무를 진다. 대한민국의 주권은 국민에게 있다."
        for i in range(count)
    )


def _english(count: int) -> str:
    return "\n\n".join(
        f"Paragraph {i}. The answer is B. Debian is a free operating system, release {i}."
        for i in range(count)
    )


def _write(ws: Workspace, relative: str, text: str) -> None:
    path = ws.sources() / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.fixture()
def sources(workspace: Workspace) -> list[SourceSpec]:
    _write(workspace, "ko/law.txt", _korean(40))
    _write(workspace, "ko/bills/1.txt", _korean(12) + "\n\n- 1 -\n\n")
    _write(workspace, "ko/bills/9.txt", "\n\n".join(f"{HOLDOUT_MARK} {i}번 법률안이다." for i in range(60)))
    _write(workspace, "en/novel.txt", _english(80))
    return [
        SourceSpec(name="law", lang="ko", glob="ko/law.txt", origin="test"),
        SourceSpec(name="bills", lang="ko", glob="ko/bills/[0-8].txt", origin="test"),
        SourceSpec(name="held", lang="ko", glob="ko/bills/9.txt", origin="test", holdout=True),
        SourceSpec(name="novel", lang="en", glob="en/novel.txt", origin="test"),
    ]


def _build(ws: Workspace, tok: Path, sources: list[SourceSpec], mix: str = "ko70", **kw: int):
    args = {"samples": 10, "seq_len": SEQ_LEN, "seed": 7} | kw
    return build_calibration_set(
        ws, "tiny", tok, parse_mix(mix), args["samples"], args["seq_len"], args["seed"], mix, sources
    )


def test_named_and_explicit_mixes() -> None:
    assert parse_mix("ko70") == {"ko": 0.7, "en": 0.3}
    assert parse_mix("ko100") == {"ko": 1.0} and parse_mix("en100") == {"en": 1.0}
    assert parse_mix(" ko = 0.25 , en=0.75") == {"ko": 0.25, "en": 0.75}
    assert set(NAMED_MIXES) == {"ko100", "ko70", "en100"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ko=0.7,en=0.2", "sum to 0.9"),
        ("ko=1.2,en=-0.2", "negative"),
        ("ko=0.5,ja=0.5", "unknown language 'ja'"),
        ("ko:0.7", "write `ko=0.7,en=0.3`"),
        ("ko=0.5,ko=0.5", "given twice"),
        ("ko=abc", "write `ko=0.7,en=0.3`"),
    ],
)
def test_mix_errors_are_one_line(text: str, says: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_mix(text)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_samples_are_token_exact_and_shares_hold(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    record = _build(workspace, tiny_model_dir, sources)
    lines = [json.loads(line) for line in Path(record.path).read_text(encoding="utf-8").splitlines()]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert len(lines) == 10
    assert all(len(tokenizer(line["text"])["input_ids"]) == SEQ_LEN == line["tokens"] for line in lines)
    assert [line["lang"] for line in lines].count("ko") == 7
    assert abs(record.tokens_by_lang["ko"] / sum(record.tokens_by_lang.values()) - 0.7) <= 0.05
    assert all(line["hangul_fraction"] == 0.0 for line in lines if line["lang"] == "en")
    assert all(line["hangul_fraction"] > 0.5 for line in lines if line["lang"] == "ko")
    assert 0.2 < record.hangul_fraction < 0.9
    assert len({line["text"] for line in lines}) == 10, "windows must not repeat"


def test_rebuild_is_byte_identical_and_reused(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    first = _build(workspace, tiny_model_dir, sources)
    data = Path(first.path).read_bytes()
    mtime = Path(first.path).stat().st_mtime_ns
    assert _build(workspace, tiny_model_dir, sources) == first
    assert Path(first.path).stat().st_mtime_ns == mtime, "same inputs must not rebuild"
    Path(first.path).unlink()
    assert _build(workspace, tiny_model_dir, sources) == first
    assert Path(first.path).read_bytes() == data
    other = _build(workspace, tiny_model_dir, sources, seed=8)
    assert other.path != first.path and Path(other.path).read_bytes() != data


def test_too_many_samples_names_the_maximum(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    with pytest.raises(UserError, match=r"at most \d+ samples") as caught:
        _build(workspace, tiny_model_dir, sources, samples=5000)
    most = int(str(caught.value).split("at most ")[1].split()[0])
    assert 10 < most < 5000
    assert _build(workspace, tiny_model_dir, sources, samples=most).samples == most


def test_short_text_uses_overlapping_windows(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ko_tokens = sum(
        len(tokenizer((workspace.sources() / p).read_text(encoding="utf-8"))["input_ids"])
        for p in ("ko/law.txt", "ko/bills/1.txt")
    )
    disjoint_at_most = ko_tokens // (SEQ_LEN - 1)
    record = _build(workspace, tiny_model_dir, sources, mix="ko100", samples=disjoint_at_most + 5)
    assert record.samples == disjoint_at_most + 5


def test_share_too_far_from_the_mix_is_an_error(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    with pytest.raises(UserError, match=r"ko token share 0\.50"):
        _build(workspace, tiny_model_dir, sources, samples=2)


def test_holdout_source_is_never_used(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    record = _build(workspace, tiny_model_dir, sources, mix="ko100", samples=30)
    assert HOLDOUT_MARK not in Path(record.path).read_text(encoding="utf-8")
    assert {source.name for source in record.sources} == {"law", "bills", "novel"}


def test_repo_catalog_declares_offline_holdout_and_pinned_hub_sources() -> None:
    catalog = load_catalog()
    offline = default_sources(catalog)
    assert {s.lang for s in offline} == {"ko", "en"}
    assert all(s.glob and not s.holdout for s in offline)
    held = holdout_sources(catalog)
    assert held and all(s.lang == "ko" for s in held)
    assert {s.glob for s in held}.isdisjoint({s.glob for s in offline})
    assert any(s.hub_id for s in catalog) and not any(s.hub_id for s in offline)


def test_missing_source_files_say_how_to_fetch_them(workspace: Workspace, tiny_model_dir: Path) -> None:
    spec = SourceSpec(name="law", lang="ko", glob="ko/none.txt", origin="test")
    with pytest.raises(UserError, match="make setup"):
        build_calibration_set(workspace, "tiny", tiny_model_dir, {"ko": 1.0}, 4, SEQ_LEN, 0, "ko100", [spec])


def test_unpinned_hub_source_is_refused(workspace: Workspace, tiny_model_dir: Path) -> None:
    spec = SourceSpec(name="wiki", lang="ko", hub_id="wikimedia/wikipedia", origin="test")
    with pytest.raises(UserError, match="no pinned revision"):
        build_calibration_set(workspace, "tiny", tiny_model_dir, {"ko": 1.0}, 4, SEQ_LEN, 0, "ko100", [spec])

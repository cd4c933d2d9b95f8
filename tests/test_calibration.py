"""Calibration sets on hand-made sources, cut with the tiny model's real byte-level BPE tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from kqe.core.errors import UserError
from kqe.core.modelstore import LocalModel
from kqe.core.workspace import Workspace
from quantize.calibration import NAMED_MIXES, build_calibration_set, parse_mix
from quantize.catalog import SourceSpec
from tests.helpers.calibration_sets import SEQ_LEN, build, sample_lines
from tests.helpers.prose import english_prose, korean_prose
from tests.helpers.sources import HOLDOUT_MARK, write_calibration_sources, write_offline_sources, write_source


@pytest.fixture()
def sources(workspace: Workspace) -> list[SourceSpec]:
    return write_calibration_sources(workspace)


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
    record = build(workspace, tiny_model_dir, sources)
    lines = sample_lines(record)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert len(lines) == 10
    assert all(len(tokenizer(line["text"])["input_ids"]) == SEQ_LEN == line["tokens"] for line in lines)
    assert [line["lang"] for line in lines].count("ko") == 7
    assert abs(record.measured_shares["ko"] - 0.7) <= 0.05
    assert record.measured_shares == {"ko": 0.7, "en": 0.3}
    assert all(line["hangul_fraction"] == 0.0 for line in lines if line["lang"] == "en")
    assert all(line["hangul_fraction"] > 0.5 for line in lines if line["lang"] == "ko")
    assert record.hangul_fraction_by_lang["en"] == 0.0 and record.hangul_fraction_by_lang["ko"] > 0.9
    assert 0.2 < record.hangul_fraction < 0.9
    assert len({line["text"] for line in lines}) == 10, "windows must not repeat"


def test_rebuild_is_byte_identical_and_reused(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    first = build(workspace, tiny_model_dir, sources)
    data = Path(first.path).read_bytes()
    mtime = Path(first.path).stat().st_mtime_ns
    assert build(workspace, tiny_model_dir, sources) == first
    assert Path(first.path).stat().st_mtime_ns == mtime, "same inputs must not rebuild"
    Path(first.path).unlink()
    assert build(workspace, tiny_model_dir, sources) == first
    assert Path(first.path).read_bytes() == data
    other = build(workspace, tiny_model_dir, sources, seed=8)
    assert other.path != first.path and Path(other.path).read_bytes() != data


def test_too_many_samples_names_the_maximum(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    with pytest.raises(UserError, match=r"at most \d+ samples") as caught:
        build(workspace, tiny_model_dir, sources, samples=5000)
    most = int(str(caught.value).split("at most ")[1].split()[0])
    assert 10 < most < 5000
    assert build(workspace, tiny_model_dir, sources, samples=most).samples == most


def test_short_text_uses_overlapping_windows(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    ko_tokens = sum(
        len(tokenizer((workspace.sources() / p).read_text(encoding="utf-8"))["input_ids"])
        for p in ("ko/law.txt", "ko/bills/1.txt")
    )
    disjoint_at_most = ko_tokens // (SEQ_LEN - 1)
    record = build(workspace, tiny_model_dir, sources, mix="ko100", samples=disjoint_at_most + 5)
    assert record.samples == disjoint_at_most + 5


def test_share_too_far_from_the_mix_is_an_error(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    with pytest.raises(UserError, match=r"ko token share 0\.50"):
        build(workspace, tiny_model_dir, sources, samples=2)


def test_holdout_source_is_never_used(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    record = build(workspace, tiny_model_dir, sources, mix="ko100", samples=30)
    assert HOLDOUT_MARK not in Path(record.path).read_text(encoding="utf-8")
    assert {source.name for source in record.sources} == {"law", "bills", "novel"}


def test_sequence_length_above_the_model_context_is_refused(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    context = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    with pytest.raises(UserError, match=rf"--seq-len {context + 1} is above the context of tiny \({context}"):
        build(workspace, tiny_model_dir, sources, seq_len=context + 1)


def test_repeated_paragraphs_and_near_copies_are_dropped_and_counted(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    original = korean_prose(4, 30)
    paragraphs = original.split("\n\n")
    # the same paragraphs again (exact repeats), then one paragraph copying them all with one word in
    # 50 changed (a near repeat)
    words = original.replace("\n\n", "\n").split(" ")
    near_copy = " ".join("변경" if i % 50 == 25 else w for i, w in enumerate(words))
    write_source(
        workspace, "ko/copies.txt", original + "\n\n" + "\n\n".join(paragraphs[:5]) + "\n\n" + near_copy
    )
    copies = SourceSpec(name="copies", lang="ko", glob="ko/copies.txt", origin="test")
    record = build(workspace, tiny_model_dir, [*sources, copies], mix="ko100", samples=40)
    assert record.dropped["duplicate_paragraphs"] == 5
    assert record.dropped["near_duplicate"] >= 3
    lines = sample_lines(record)
    from quantize.dedup import NearDuplicates

    index = NearDuplicates()
    assert not any(index.is_near_duplicate(line["text"]) for line in lines)


def test_off_language_windows_are_dropped(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec]
) -> None:
    # a "Korean" source whose second half is untranslated English, as in the Korean Debian FAQ
    write_source(workspace, "ko/law.txt", korean_prose(1, 40) + "\n\n" + english_prose(5, 40))
    record = build(workspace, tiny_model_dir, sources, mix="ko100", samples=20)
    assert record.dropped["off_language"] > 0
    assert all(line["hangul_fraction"] >= 0.5 for line in sample_lines(record))
    assert record.measured_shares == {"ko": 1.0}


def test_chat_template_frames_each_sample_token_exact(
    workspace: Workspace, tiny_model_dir: Path, sources: list[SourceSpec], tmp_path: Path
) -> None:
    model = tmp_path / "chat-tiny"
    model.mkdir()
    for path in tiny_model_dir.iterdir():
        (model / path.name).write_bytes(path.read_bytes())
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["chat_template"] = (
        "{{ bos_token }}{% for m in messages %}<|user|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    )
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    record = build(workspace, model, sources, chat_template=True)
    tokenizer = AutoTokenizer.from_pretrained(model)
    lines = sample_lines(record)
    assert record.chat_template and len(lines) == 10
    for line in lines:
        assert line["text"].startswith("<|user|>\n") and line["text"].endswith("<|end|>\n")
        ids = tokenizer(line["text"])["input_ids"]
        assert len(ids) == SEQ_LEN == line["tokens"]
        assert ids.count(tokenizer.bos_token_id) == 1, "the template's BOS is the tokenizer's, not a second"
    with pytest.raises(UserError, match="has no chat template"):
        build(workspace, tiny_model_dir, sources, chat_template=True)


def test_missing_source_files_say_how_to_fetch_them(workspace: Workspace, tiny_model_dir: Path) -> None:
    spec = SourceSpec(name="law", lang="ko", glob="ko/none.txt", origin="test")
    with pytest.raises(UserError, match="make setup"):
        build_calibration_set(
            workspace, LocalModel("tiny", tiny_model_dir), {"ko": 1.0}, 4, SEQ_LEN, 0, "ko100", [spec]
        )


def test_unpinned_hub_source_is_refused(workspace: Workspace, tiny_model_dir: Path) -> None:
    spec = SourceSpec(name="wiki", lang="ko", hub_id="wikimedia/wikipedia", origin="test")
    with pytest.raises(UserError, match="no pinned revision"):
        build_calibration_set(
            workspace, LocalModel("tiny", tiny_model_dir), {"ko": 1.0}, 4, SEQ_LEN, 0, "ko100", [spec]
        )


def test_a_source_holding_held_out_text_is_refused(workspace: Workspace, tiny_model_dir: Path) -> None:
    """A user's source that reads a held-out bill (the perplexity text) never becomes calibration."""
    write_offline_sources(workspace.sources())
    spec = SourceSpec(name="all-bills", lang="ko", glob="ko/bills/*.txt", origin="test")
    with pytest.raises(UserError, match="calibration source 'all-bills' holds held-out text"):
        build_calibration_set(
            workspace, LocalModel("tiny", tiny_model_dir), {"ko": 1.0}, 4, SEQ_LEN, 0, "ko100", [spec]
        )

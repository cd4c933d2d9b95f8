"""The source catalog: the repo's `sources.toml`, line cuts, hub specs, held-out text for perplexity."""

from __future__ import annotations

from pathlib import Path

import pytest

from kqe.core.errors import UserError
from kqe.core.workspace import Workspace
from quantize.catalog import (
    default_sources,
    holdout_sources,
    holdout_texts,
    load_catalog,
    named_sources,
    read_sources,
)
from tests.test_calibration import english_prose, write_source

BOTCHAN = (
    "The Project Gutenberg EBook of Botchan\n\nLicence text.\n\nCHAPTER I\n\n{one}\n\n"
    "CHAPTER IX.\n\n{nine}\n\nCHAPTER X.\n\n{ten}\n\nCHAPTER XI.\n\n{eleven}\n"
    "--(THE END)--\n[A: Insitent]\nEnd of Project Gutenberg\n"
)


def test_repo_catalog_declares_offline_holdout_and_hub_sources() -> None:
    catalog = load_catalog()
    offline = default_sources(catalog)
    assert {s.lang for s in offline} == {"ko", "en"}
    assert all(s.glob and not s.holdout for s in offline)
    assert {"debian-faq-ko", "debian-faq-en"} <= {s.name for s in offline}
    held = holdout_sources(catalog)
    assert {s.lang for s in held} == {"ko", "en"}, "perplexity needs held-out text in both languages"
    assert any(s.hub_id for s in catalog) and not any(s.hub_id for s in offline)
    hub = [s for s in catalog if s.hub_id]
    assert {s.lang for s in hub} == {"ko", "en"} and all(s.text_field and s.split for s in hub)


def test_holdout_and_calibration_text_never_overlap(workspace: Workspace) -> None:
    """The repo's Botchan entries cut one file in two: chapters I–IX calibrate, X–XI are held out."""
    text = BOTCHAN.format(
        one=english_prose(1, 3),
        nine=english_prose(9, 3),
        ten=english_prose(10, 3),
        eleven=english_prose(11, 3),
    )
    write_source(workspace, "en/botchan.txt", text)
    catalog = {s.name: s for s in load_catalog()}
    (_, calibration), (_, held) = read_sources(workspace, [catalog["botchan"], catalog["botchan-holdout"]])
    assert calibration.startswith("CHAPTER I\n") and calibration.rstrip().endswith(english_prose(9, 3))
    assert held.startswith("CHAPTER X.\n") and held.rstrip().endswith(english_prose(11, 3))
    assert "Licence" not in calibration + held and "THE END" not in held and "Insitent" not in held
    assert calibration + held in text
    ko = [s for s in catalog.values() if s.holdout and s.lang == "ko"]
    for number in range(10):
        write_source(workspace, f"ko/bills/180989{number}.txt", f"법률안 {number}호\n")
    texts = holdout_texts(workspace, [*ko, catalog["botchan-holdout"]])
    assert texts["en"] == held.strip() + "\n"
    assert texts["ko"] == "\n\n".join(f"법률안 {n}호" for n in range(6, 10)) + "\n"


def test_a_marker_that_matches_nothing_is_a_user_error(workspace: Workspace) -> None:
    write_source(workspace, "en/botchan.txt", "no chapters here\n")
    botchan = next(s for s in load_catalog() if s.name == "botchan")
    with pytest.raises(UserError, match=r"no line of en/botchan.txt matches /\^CHAPTER I\$/"):
        read_sources(workspace, [botchan])


def test_hub_specs_parse_and_are_named_explicitly(tmp_path: Path) -> None:
    toml = tmp_path / "sources.toml"
    toml.write_text(
        '[[source]]\nname = "wiki"\nlang = "ko"\nhub_id = "wikimedia/wikipedia"\nhub_config = "20231101.ko"\n'
        f'revision = "{"a" * 40}"\nmax_chars = 1000\norigin = "hub"\n\n'
        '[[source]]\nname = "held"\nlang = "en"\nglob = "en/x.txt"\norigin = "file"\nholdout = true\n',
        encoding="utf-8",
    )
    catalog = load_catalog(toml)
    wiki = named_sources(["wiki"], catalog)[0]
    assert (wiki.hub_id, wiki.hub_config, wiki.split, wiki.text_field) == (
        "wikimedia/wikipedia",
        "20231101.ko",
        "train",
        "text",
    )
    assert wiki.revision == "a" * 40 and wiki.max_chars == 1000
    assert default_sources(catalog) == [], "hub sources are never a default"
    with pytest.raises(UserError, match="held out for perplexity"):
        named_sources(["held"], catalog)
    with pytest.raises(UserError, match=r"'nope' is not in .*known: wiki, held"):
        named_sources(["nope"], catalog)


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ('name = "x"\nlang = "ja"\nglob = "a"\norigin = "o"', "lang"),
        ('name = "x"\nlang = "ko"\norigin = "o"', "exactly one of"),
        ('name = "x"\nlang = "ko"\nglob = "a"\nhub_id = "b"\norigin = "o"', "exactly one of"),
        ('name = "x"\nlang = "ko"\nglob = "a"\norigin = "o"\nrevison = "typo"', "revison"),
    ],
)
def test_bad_catalog_entries_are_one_line_errors(entry: str, says: str, tmp_path: Path) -> None:
    toml = tmp_path / "sources.toml"
    toml.write_text(f"[[source]]\n{entry}\n", encoding="utf-8")
    with pytest.raises(UserError) as caught:
        load_catalog(toml)
    message = str(caught.value)
    assert "\n" not in message and str(toml) in message
    assert says in message and "source x" in message

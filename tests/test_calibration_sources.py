"""The source catalog: the repo's `sources.toml`, line cuts, hub specs, held-out text for perplexity."""

from __future__ import annotations

from pathlib import Path

import pytest

from kqe.core.errors import UserError
from kqe.core.workspace import Workspace
from quantize.catalog import (
    SourceSpec,
    check_holdout_unused,
    default_sources,
    holdout_documents,
    holdout_sources,
    load_catalog,
    named_sources,
    read_sources,
)
from tests.helpers.prose import english_prose, korean_prose
from tests.helpers.sources import write_source

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
    ko = [s for s in catalog.values() if s.holdout and s.lang == "ko" and s.text_set is None]
    for number in range(10):
        write_source(workspace, f"ko/bills/180989{number}.txt", f"법률안 {number}호\n")
    documents = holdout_documents(workspace, [*ko, catalog["botchan-holdout"]])
    assert list(documents["en"]) == ["X", "XI"], "one document per chapter"
    assert "".join(documents["en"].values()).replace("\n", "") == held.replace("\n", "")
    assert documents["ko"] == {f"180989{n}": f"법률안 {n}호\n" for n in range(6, 10)}, "one per bill"


FAQ = {
    "ko": "목차\n\n13. 기여하기\n\n12장. 지원\n\n{twelve}\n\n13장. 기여하기\n\n{intro}\n\n13.1. 어떻게?\n\n"
    "{one}\n\n14장. 재배포\n\n14.1. 팔 수 있나요?\n\n{two}\n\n15장. 변화\n\n{fifteen}\n",
    "en": "Contents\n\n13. Contributing\n\nChapter\u00a012. Support\n\n{twelve}\n\nChapter\u00a013. "
    "Contributing\n\n{intro}\n\n13.1.\u00a0How?\n\n{one}\n\nChapter\u00a014. Redistributing\n\n"
    "14.1.\u00a0Can I sell?\n\n{two}\n\nChapter\u00a015. Changes\n\n{fifteen}\n",
}


def _write_faq(workspace: Workspace) -> None:
    for lang, name in (("ko", "debian-faq.ko.txt"), ("en", "debian-faq.en.txt")):
        parts = {
            key: f"{lang} {key} " + english_prose(n, 2)
            for n, key in enumerate(("twelve", "intro", "one", "two", "fifteen"))
        }
        write_source(workspace, f"{lang}/debian-faq/{name}", FAQ[lang].format(**parts))


def test_the_faq_chapters_13_14_are_held_out_in_both_languages_section_by_section(
    workspace: Workspace,
) -> None:
    """The repo's FAQ entries: chapters up to 12 calibrate, 13–14 are the parallel perplexity sets,
    one document per numbered section, the same names in both languages (English uses NBSPs)."""
    _write_faq(workspace)
    catalog = load_catalog()
    faq = [s for s in catalog if s.name.startswith("debian-faq")]
    documents = holdout_documents(workspace, faq)
    assert set(documents) == {"faq_ko", "faq_en"}
    assert list(documents["faq_ko"]) == list(documents["faq_en"]) == ["preamble", "13.1", "14.1"]
    for lang in ("ko", "en"):
        texts = documents[f"faq_{lang}"]
        assert f"{lang} intro" in texts["preamble"] and f"{lang} one" in texts["13.1"]
        assert f"{lang} two" in texts["14.1"] and f"{lang} fifteen" not in texts["14.1"]
    calibration = read_sources(workspace, [s for s in faq if not s.holdout])
    assert all("twelve" in text and "intro" not in text and "fifteen" not in text for _, text in calibration)
    check_holdout_unused(workspace, calibration, catalog)  # nothing leaks: no error


def test_calibration_text_holding_a_held_out_paragraph_is_refused(workspace: Workspace) -> None:
    _write_faq(workspace)
    faq = [s for s in load_catalog() if s.name.startswith("debian-faq")]
    leaked = faq[0].model_copy(update={"stop": None})  # the whole Korean FAQ, chapters 13–14 included
    with pytest.raises(UserError, match=r"calibration source 'debian-faq-ko' holds held-out text .*start"):
        check_holdout_unused(workspace, read_sources(workspace, [leaked]), faq)


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


def test_a_section_pattern_that_is_not_a_regex_is_one_line(tmp_path: Path) -> None:
    toml = tmp_path / "sources.toml"
    toml.write_text(
        '[[source]]\nname = "held"\nlang = "en"\nglob = "en/x.txt"\norigin = "file"\nholdout = true\n'
        'sections = "^(\\\\d+"\n',
        encoding="utf-8",
    )
    with pytest.raises(UserError, match=r"source held: sections: '\^\(\\\\d\+' is not a regex .*: fix it"):
        load_catalog(toml)


def test_the_help_pages_are_parallel_held_out_sets_one_document_per_page(workspace: Workspace) -> None:
    pages = {
        name: (korean_prose(n, 3), english_prose(n, 3)) for n, name in enumerate(("sdraw.a", "shared.b"))
    }
    for name, (ko, en) in pages.items():
        write_source(workspace, f"lo-help/ko/{name}.txt", ko + "\n")
        write_source(workspace, f"lo-help/en/{name}.txt", en + "\n")
    catalog = load_catalog()
    help_sets = [s for s in catalog if s.name.startswith("lo-help")]
    assert help_sets and all(s.holdout for s in help_sets)
    assert not set(help_sets) & set(default_sources(catalog)), "never a calibration default"
    documents = holdout_documents(workspace, help_sets)
    assert list(documents) == ["lo_en", "lo_ko"]
    assert list(documents["lo_ko"]) == list(documents["lo_en"]) == list(pages), "the same pages, by name"
    assert documents["lo_ko"]["shared.b"] == pages["shared.b"][0] + "\n"
    with pytest.raises(UserError, match="held out for perplexity"):
        named_sources(["lo-help-ko"], catalog)


def test_calibration_text_holding_a_help_paragraph_is_refused(workspace: Workspace) -> None:
    page = korean_prose(7, 3)
    write_source(workspace, "lo-help/ko/shared.c.txt", page + "\n")
    write_source(workspace, "ko/law.txt", korean_prose(8, 4) + "\n\n" + page.split("\n\n")[1] + "\n")
    law = SourceSpec(name="law", lang="ko", glob="ko/law.txt", origin="test")
    help_sets = [s for s in load_catalog() if s.name.startswith("lo-help")]
    with pytest.raises(UserError, match=r"calibration source 'law' holds held-out text"):
        check_holdout_unused(workspace, read_sources(workspace, [law]), help_sets)

"""LibreOffice help pages: HTML to paragraphs, the translated paragraphs paired with their originals,
the page selection (path order, stride, budget) that `make setup` writes as the lo_ko / lo_en sets."""

from __future__ import annotations

from kqe.core.help_pages import (
    MIN_HANGUL_SHARE,
    PAGE_LETTERS,
    Paragraph,
    document_name,
    hangul_share,
    pair_page,
    parallel_pages,
    parse_page,
)
from tests.helpers.help_pages import help_page, parallel_help
from tests.helpers.prose import english_prose, korean_prose


def _hangul(text: str) -> int:
    return sum(1 for c in text if "가" <= c <= "힣")


def test_a_page_is_its_content_area_without_scripts_navigation_or_hidden_variants() -> None:
    page = parse_page(
        "text/x.html", help_page("en", "Load & Save", [("par_id7", "Specifies  general\nsettings.")])
    )
    assert page.title == "Load & Save"
    assert page.paragraphs == (
        Paragraph("hd_id1", "Load & Save"),
        Paragraph("par_id7", "Specifies general settings."),
        Paragraph("par_id900", "Choose Tools - Options."),
    )
    assert page.text == "Load & Save\n\nSpecifies general settings.\n\nChoose Tools - Options."


def test_code_keeps_its_lines_and_blocks_without_an_id_are_numbered() -> None:
    html = (
        '<html><head><title>t</title></head><body><div id="DisplayArea"><div class="note">'
        '<p dir="auto">Note <b>this</b></p></div><pre><code>Sub Main\n    Print "A"\n\nEnd Sub\n</code></pre>'
        "<ul><li>one<li>two</ul></div><p>after the content area</p></body></html>"
    )
    page = parse_page("text/y.html", html)
    assert [p.text for p in page.paragraphs] == [
        "Note this",
        'Sub Main\n    Print "A"\nEnd Sub',
        "one",
        "two",
    ]
    assert [p.key for p in page.paragraphs] == ["#1", "#2", "#3", "#4"]


def test_hangul_share_counts_letters_only() -> None:
    assert hangul_share("가나 AB 12 !!") == 0.5
    assert hangul_share("2024 - 3") == 0.0
    assert hangul_share(korean_prose(1, 2)) == 1.0


def test_a_pair_keeps_translated_paragraphs_and_their_originals_up_to_the_budget() -> None:
    ko_html, en_html = parallel_help(5, 12, untranslated=3)
    ko, en = parse_page("text/a.html", ko_html), parse_page("text/a.html", en_html)
    pair = pair_page(ko, en)
    assert pair is not None and pair.path == "text/a.html"
    assert [p.key for p in pair.ko.paragraphs] == [p.key for p in pair.en.paragraphs]
    assert all(hangul_share(p.text) >= MIN_HANGUL_SHARE for p in pair.ko.paragraphs)
    originals = {p.key: p.text for p in en.paragraphs}
    assert all(originals[p.key] == p.text for p in pair.en.paragraphs)
    letters = [_hangul(p.text) for p in pair.ko.paragraphs]
    assert sum(letters) >= PAGE_LETTERS > sum(letters[:-1]), "whole paragraphs until the budget is reached"
    assert len(pair.ko.paragraphs) < len(ko.paragraphs) - 3, "the page held more than its budget"
    untranslated = {p.key for p in ko.paragraphs if hangul_share(p.text) < MIN_HANGUL_SHARE}
    assert "par_id900" in untranslated and not untranslated & {p.key for p in pair.ko.paragraphs}


def test_pages_that_differ_in_structure_or_hold_too_little_korean_do_not_pair() -> None:
    ko_html, en_html = parallel_help(6, 12)
    ko, en = parse_page("text/b.html", ko_html), parse_page("text/b.html", en_html)
    shifted = help_page("en", "Help", [("par_id_other", english_prose(6, 1))])
    assert pair_page(ko, parse_page("text/b.html", shifted)) is None, "no paragraph pairs safely"
    assert pair_page(ko, parse_page("text/c.html", en_html)) is None, "another page"
    total = sum(_hangul(p.text) for p in ko.paragraphs if hangul_share(p.text) >= MIN_HANGUL_SHARE)
    assert pair_page(ko, en, letters=total) is not None
    assert pair_page(ko, en, letters=total + 1) is None


def test_the_selection_is_every_strideth_pairing_page_in_path_order() -> None:
    pages = {f"text/m{n % 3}/p{n}.html": parallel_help(20 + n, 8) for n in range(9)}
    pages["text/m0/short.html"] = parallel_help(40, 1)
    ko = {path: pair[0] for path, pair in pages.items()}
    en = {path: pair[1] for path, pair in pages.items() if path != "text/m2/p8.html"}  # no English page
    paired = sorted(set(en) - {"text/m0/short.html"})
    assert [p.path for p in parallel_pages(ko, en, stride=1)] == paired
    assert [p.path for p in parallel_pages(ko, en, stride=3)] == paired[::3]
    again = parallel_pages(dict(reversed(ko.items())), en, stride=3)
    assert again == parallel_pages(ko, en, stride=3), "the same packages give the same selection"


def test_document_names_keep_the_module_so_names_never_collide() -> None:
    assert document_name("text/shared/optionen/01020000.html") == "shared.optionen.01020000"
    assert document_name("text/swriter/01/01020000.html") == "swriter.01.01020000"

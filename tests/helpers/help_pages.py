"""LibreOffice help pages in the HTML layout of Debian's libreoffice-help-* packages (7.4): the page
chrome (scripts, header, index, contents), the content area with keyed paragraphs, an OS switch whose
variants the help's JavaScript hides, a related-topics list and the debug footer."""

from __future__ import annotations

import html

from tests.helpers.prose import english_prose, korean_prose

CHROME = (
    '<script type="text/javascript" src="help.js" defer></script></head><body>'
    '<header id="TopLeftHeader"><a class="logo" href="x"><p dir="auto">LibreOffice 7.4 Help</p></a>'
    '<nav id="modules-nav"></nav></header><aside class="leftside"><div id="Index">'
    '<div class="index-label" dir="auto">Index</div></div></aside>'
)
"""What precedes the content area on every page."""
FOOTER = (
    '<div id="SearchFrame"></div><footer><div id="DEBUG" class="debug"><h3 class="bug">Help content '
    "debug info:</h3><p>This page is: /text/x.xhp</p></div></footer></body></html>"
)
"""What follows it."""
SWITCH = (
    '<p id="par_id900" class="paragraph" dir="auto">{choose} <span class="switchinline">'
    '<span hidden="true" id="MACtextx_1" class="MAC">LibreOffice - Preferences</span>'
    '<span hidden="true" id="defaulttextx_1">Tools - Options</span></span>.</p>'
)
"""A paragraph naming a menu path per OS: the reader without a match sees the default one."""


def help_page(lang: str, title: str, paragraphs: list[tuple[str, str]]) -> str:
    """A page: `<title>`, an `h1`, the keyed paragraphs (key, text), the OS switch, related topics."""
    body = "".join(
        f'<p id="{key}" class="paragraph" dir="auto"><span class="avis">{html.escape(text)}</span></p>\n'
        for key, text in paragraphs
    )
    choose = "선택" if lang == "ko" else "Choose"
    related = '<div class="relatedtopics"><p class="related">Related Topics</p><a href="y">Other</a></div>'
    return (
        f'<!DOCTYPE html><html lang="{lang}"><head><title>{html.escape(title)}</title>{CHROME}'
        f'<div id="DisplayArea"><h1 id="hd_id1" dir="auto">{html.escape(title)}</h1>\n{body}'
        f"{SWITCH.format(choose=choose)}{related}</div>{FOOTER}"
    )


def parallel_help(seed: int, count: int, untranslated: int = 0) -> tuple[str, str]:
    """(Korean, English) versions of one page: `count` paragraphs, the last `untranslated` left in
    English on the Korean page (as the real translation leaves some)."""
    english = english_prose(seed, count).split("\n\n")
    korean = korean_prose(seed, count).split("\n\n")[: count - untranslated] + english[count - untranslated :]
    keys = [f"par_id{seed}{n:03d}" for n in range(count)]
    return (
        help_page("ko", f"도움말 {seed}", list(zip(keys, korean, strict=True))),
        help_page("en", f"Help {seed}", list(zip(keys, english, strict=True))),
    )

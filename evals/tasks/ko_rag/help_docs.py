"""ko_rag passages from LibreOffice's Korean help: whole pages that `make setup` writes under
`lo-help/rag-ko/` (`kqe.core.help_pages.rag_pages`: the options dialogs, Calc's and Writer's how-to
pages and the shortcut-key tables of Debian's `libreoffice-help-ko` 7.4).

Each file holds the page's title on its first line and one paragraph a line. A page is one passage,
`lo-help/<page>` (e.g. `lo-help/shared.optionen.01040900`), cut at paragraph boundaries into
`<id>#2`, `<id>#3`, … when longer than `MAX_CHARS` like every other passage; its title says which
help page it is. The pages of the other folders' kind are each other's distractors.
"""

from __future__ import annotations

from pathlib import Path

from evals.tasks.ko_rag.docs import Passage, split_long
from kqe.core.errors import UserError

HELP_PAGES = "lo-help/rag-ko"
"""Folder of the whole Korean help pages under the sources folder."""
TITLE_PREFIX = "LibreOffice 도움말: "


def help_passages(sources: Path) -> list[Passage]:
    """The help pages' passages in page-name order; a missing folder asks for `make setup`."""
    folder = sources / HELP_PAGES
    files = sorted(folder.glob("*.txt")) if folder.is_dir() else []
    if not files:
        raise UserError(f"ko_rag documents {folder}/*.txt are missing: run `make setup`")
    passages = []
    for path in files:
        title, _, body = path.read_text(encoding="utf-8").strip("\n").partition("\n")
        if body.strip():
            page = Passage(f"lo-help/{path.stem}", TITLE_PREFIX + title.strip(), body.strip("\n"))
            passages += split_long(page)
    return passages

"""The text sources of calibration sets and perplexity, declared in `calibration_data/sources.toml`.

Offline sources are files under `ws.sources()` (filled by `make setup`, see `kqe.core.sources`), optionally
cut to the lines between a `start` and a `stop` marker; hub sources are Hugging Face datasets at a
pinned revision, read only when named. `holdout = true` reserves a source for perplexity.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from kqe.core.errors import UserError
from kqe.core.io import sha256_of
from kqe.core.records import SourceFile
from kqe.core.workspace import Workspace

SOURCES_TOML = Path(__file__).resolve().parents[1] / "calibration_data" / "sources.toml"
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_REVISION = re.compile(r"[0-9a-f]{40}")


class SourceSpec(BaseModel):
    """One `[[source]]` entry of `calibration_data/sources.toml`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    lang: Literal["ko", "en"]
    origin: str
    glob: str | None = None
    """Files under the sources folder (offline)."""
    start: str | None = None
    """Regex: each file is read from the first line matching it (inclusive)."""
    stop: str | None = None
    """Regex: each file is read up to the first line matching it (exclusive)."""
    hub_id: str | None = None
    """Hugging Face dataset id (online users only)."""
    hub_config: str | None = None
    split: str = "train"
    text_field: str = "text"
    revision: str = ""
    """Pinned dataset commit (40 hex); required to load a hub source."""
    max_chars: int = 400_000
    """Characters read from a hub source."""
    holdout: bool = False
    """Reserved for perplexity: never used for calibration."""

    @model_validator(mode="after")
    def _one_location(self) -> SourceSpec:
        if (self.glob is None) == (self.hub_id is None):
            raise ValueError("give exactly one of `glob` (offline file) or `hub_id` (online dataset)")
        return self


def load_catalog(path: Path = SOURCES_TOML) -> list[SourceSpec]:
    """Every source declared in `path`, offline and online, held-out ones included."""
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("source", [])
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"calibration sources {path}: {str(exc).splitlines()[0]}: fix the file") from None
    specs = []
    for number, entry in enumerate(entries, start=1):
        try:
            specs.append(SourceSpec.model_validate(entry))
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "entry"
            name = entry.get("name", f"#{number}")
            message = error["msg"].removeprefix("Value error, ")
            raise UserError(
                f"calibration sources {path}: source {name}: {where}: {message}: fix it"
            ) from None
    return specs


def default_sources(catalog: Sequence[SourceSpec] | None = None) -> list[SourceSpec]:
    """The offline sources that may feed calibration (held-out and hub sources excluded)."""
    specs = load_catalog() if catalog is None else catalog
    return [s for s in specs if s.glob is not None and not s.holdout]


def holdout_sources(catalog: Sequence[SourceSpec] | None = None) -> list[SourceSpec]:
    """The sources reserved for perplexity."""
    specs = load_catalog() if catalog is None else catalog
    return [s for s in specs if s.holdout]


def named_sources(names: Sequence[str], catalog: Sequence[SourceSpec] | None = None) -> list[SourceSpec]:
    """The calibration sources called `names` (hub sources included); held-out ones are refused."""
    specs = {s.name: s for s in (load_catalog() if catalog is None else catalog)}
    for name in names:
        if name not in specs:
            raise UserError(
                f"calibration source {name!r} is not in {SOURCES_TOML}: known: {', '.join(specs)}"
            )
        if specs[name].holdout:
            raise UserError(f"calibration source {name!r} is held out for perplexity: name another source")
    return [specs[name] for name in names]


def holdout_texts(ws: Workspace, catalog: Sequence[SourceSpec] | None = None) -> dict[str, str]:
    """Language → the held-out text (files joined by a blank line), for perplexity."""
    texts: dict[str, list[str]] = {}
    for source, text in read_sources(ws, holdout_sources(catalog)):
        texts.setdefault(source.lang, []).append(text.strip())
    return {lang: "\n\n".join(parts) + "\n" for lang, parts in sorted(texts.items())}


def paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs that contain a letter (page numbers and rules dropped)."""
    text = text.replace("\r\n", "\n").lstrip("\ufeff")
    return [p.strip() for p in _PARAGRAPH_BREAK.split(text) if any(c.isalpha() for c in p)]


def read_sources(ws: Workspace, specs: Sequence[SourceSpec]) -> list[tuple[SourceFile, str]]:
    """The text of every file (cut to its `start`/`stop` lines) or hub slice of `specs`, with provenance."""
    texts: list[tuple[SourceFile, str]] = []
    for spec in specs:
        if spec.hub_id is not None:
            text = _hub_text(spec)
            origin = f"{spec.origin} @ {spec.revision}"
            source = SourceFile(name=spec.name, lang=spec.lang, origin=origin, sha256=sha256_of(text))
            texts.append((source, text))
            continue
        assert spec.glob is not None
        files = sorted(ws.sources().glob(spec.glob))
        if not files:
            raise UserError(
                f"calibration source {spec.name!r}: no files match {ws.sources() / spec.glob}: "
                "run `make setup` to fetch the offline sources"
            )
        for path in files:
            raw = path.read_bytes()
            where = path.relative_to(ws.sources()).as_posix()
            cut = "" if spec.start is None and spec.stop is None else f" lines /{spec.start}/../{spec.stop}/"
            origin = f"{spec.origin} [{where}{cut}]"
            source = SourceFile(name=spec.name, lang=spec.lang, origin=origin, sha256=sha256_of(raw))
            texts.append((source, _cut_lines(raw.decode("utf-8"), spec, where)))
    return texts


def _cut_lines(text: str, spec: SourceSpec, where: str) -> str:
    begin, end = 0, len(text)
    for pattern, is_start in ((spec.start, True), (spec.stop, False)):
        if pattern is None:
            continue
        found = re.search(pattern, text, flags=re.MULTILINE)
        if found is None:
            raise UserError(f"calibration source {spec.name!r}: no line of {where} matches /{pattern}/")
        begin, end = (found.start(), end) if is_start else (begin, found.start())
    return text[begin:end]


def _hub_text(spec: SourceSpec) -> str:
    if not _REVISION.fullmatch(spec.revision):
        raise UserError(
            f"calibration source {spec.name!r} has no pinned revision: set a 40-hex dataset commit "
            f"as `revision` in {SOURCES_TOML}"
        )
    from datasets import load_dataset

    rows = load_dataset(
        spec.hub_id, spec.hub_config, split=spec.split, revision=spec.revision, streaming=True
    )
    parts: list[str] = []
    size = 0
    for row in rows:
        parts.append(str(row[spec.text_field]))
        size += len(parts[-1])
        if size >= spec.max_chars:
            break
    return "\n\n".join(parts)

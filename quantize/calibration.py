"""Calibration sets with a controlled Korean/English token mix, cut with the target model's tokenizer.

Sources come from `calibration_data/sources.toml` (`quantize.catalog`); held-out sources
(`holdout = true`) are never read here (they are for perplexity). Per language, the paragraphs of
its sources lose exact repeats (`quantize.dedup`) and are tokenized as one stream;
`quantize.windows` cuts it into windows of exactly `seq_len` model tokens, drops off-language,
contaminated (`quantize.contamination`) and near-duplicate windows, and picks
`round(samples × share)` of the rest under the seed. The measured Korean share (a sample counts as
Korean when most of its letters are Hangul) must be within 5 points of the asked share.
Same inputs, same bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kqe.core import defaults
from kqe.core.chat import Framing, chat_framing
from kqe.core.errors import UserError
from kqe.core.hangul import hangul_letters
from kqe.core.io import loads_json, read_record, refuse_link, sha256_of, write_atomic, write_record
from kqe.core.modelstore import LocalModel
from kqe.core.records import CalibrationSet, SourceFile, content_hash
from kqe.core.workspace import Workspace, safe_name
from quantize.catalog import SourceSpec, check_holdout_unused, default_sources, paragraphs, read_sources
from quantize.contamination import ContaminationGuard
from quantize.dedup import unique_paragraphs
from quantize.windows import DROP_REASONS, WindowCutter, measured_lang

log = logging.getLogger(__name__)

LANGS = ("ko", "en")
NAMED_MIXES: dict[str, dict[str, float]] = {
    "ko100": {"ko": 1.0},
    "ko70": {"ko": 0.7, "en": 0.3},
    "en100": {"en": 1.0},
}
DEFAULT_MIX = "ko70"
DEFAULT_SAMPLES = 64
DEFAULT_SEQ_LEN = defaults.CALIB_SEQ_LEN
MAX_SHARE_GAP = 0.05
"""Largest allowed gap between the asked and the measured token share of a language."""
BUILDER_VERSION = 2
"""Bumped when the cutting rules change, so older sets are not reused under the same key."""
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
)
"""Files that make up a tokenizer: hashed into keys and copied verbatim into built checkpoints."""


def parse_mix(text: str) -> dict[str, float]:
    """`ko70`/`ko100`/`en100` or `ko=0.7,en=0.3` → {lang: share}; shares are ≥ 0 and sum to 1."""
    if text in NAMED_MIXES:
        return dict(NAMED_MIXES[text])
    mix: dict[str, float] = {}
    for part in text.split(","):
        lang, sep, value = part.partition("=")
        lang = lang.strip()
        try:
            share = float(value)
        except ValueError:
            share = math.nan
        if not sep or math.isnan(share):
            raise UserError(
                f"calibration mix {text!r}: write `ko=0.7,en=0.3` or one of {', '.join(NAMED_MIXES)}"
            )
        if lang in mix:
            raise UserError(f"calibration mix {text!r}: {lang} is given twice")
        mix[lang] = share
    check_mix(mix, text)
    return mix


def check_mix(mix: dict[str, float], label: str) -> None:
    unknown = sorted(set(mix) - set(LANGS))
    if unknown:
        known = ", ".join(LANGS)
        raise UserError(f"calibration mix {label!r}: unknown language {unknown[0]!r}; known: {known}")
    negative = [lang for lang, share in mix.items() if share < 0]
    if negative:
        raise UserError(f"calibration mix {label!r}: share of {negative[0]} is negative")
    if abs(sum(mix.values()) - 1.0) > 1e-6:
        raise UserError(f"calibration mix {label!r}: shares sum to {sum(mix.values()):g}, not 1")


def allocate(samples: int, mix: dict[str, float]) -> dict[str, int]:
    """Samples per language: round(samples*share), by largest remainder so the counts sum to `samples`."""
    exact = {lang: samples * share for lang, share in mix.items()}
    counts = {lang: math.floor(value) for lang, value in exact.items()}
    left = samples - sum(counts.values())
    for lang in sorted(mix, key=lambda lang: (counts[lang] - exact[lang], lang))[:left]:
        counts[lang] += 1
    return counts


def tokenizer_hash(tokenizer_dir: Path) -> str:
    """sha256 over the tokenizer files present in `tokenizer_dir` (names and bytes)."""
    digest = hashlib.sha256()
    present = [tokenizer_dir / name for name in TOKENIZER_FILES if (tokenizer_dir / name).is_file()]
    if not present:
        raise UserError(f"no tokenizer files in {tokenizer_dir}: point at a model directory with a tokenizer")
    for path in present:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def model_context(model_dir: Path) -> int | None:
    """The model's context length from its config.json (`max_position_embeddings`), if stated."""
    try:
        config = loads_json((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for section in (config, config.get("text_config") or {}):
        if isinstance(section.get("max_position_embeddings"), int):
            return int(section["max_position_embeddings"])
    return None


def build_calibration_set(
    ws: Workspace,
    model: LocalModel,
    mix: dict[str, float],
    samples: int,
    seq_len: int,
    seed: int,
    name: str,
    sources: Sequence[SourceSpec] | None = None,
    *,
    eval_items: Sequence[str] | None = None,
    allow_contamination: bool = False,
    chat_template: bool = False,
    out_dir: Path | None = None,
) -> CalibrationSet:
    """Build (or reuse) `samples` windows of `seq_len` tokens with `mix` token shares, chosen under `seed`.

    `sources` defaults to the offline sources of `calibration_data/sources.toml`; held-out sources
    are dropped whatever is passed. Windows sharing a 13-gram with any of `eval_items` (the run's
    evaluation items as text) are dropped unless `allow_contamination`. Writes `<name>-<key>.jsonl`
    and `<name>-<key>.json` under `out_dir` (default `ws.calibration(model.name)`); the same inputs give
    the same key and byte-identical files.
    """
    asked = _Asked(name, mix, samples, seq_len, seed, model.folder, chat_template, allow_contamination)
    check_mix(mix, name)
    check_lengths(model, samples, seq_len, name)
    folder = refuse_link(ws.calibration(model.name)) if out_dir is None else out_dir  # before any cut
    texts = _source_texts(ws, sources, mix, name)
    guard = None if allow_contamination or not eval_items else ContaminationGuard(eval_items)
    key = _set_key(asked, texts, guard)
    record_path, samples_path = (
        folder / f"{safe_name(name)}-{key}.json",
        folder / f"{safe_name(name)}-{key}.jsonl",
    )
    if record_path.exists() and samples_path.exists():
        record = read_record(record_path, CalibrationSet)
        if record.sha256 == sha256_of(samples_path.read_bytes()):
            log.info("calibration set %s reused (%s)", name, record_path)
            return record
    record, body = _cut_set(asked, texts, guard, samples_path)
    _check_shares(mix, record.measured_shares, name, samples)
    write_atomic(samples_path, body)
    write_record(record_path, record)
    log.info(
        "calibration set %s: %s tokens, measured %s, dropped %s → %s",
        name,
        record.tokens_by_lang,
        record.measured_shares,
        record.dropped,
        samples_path,
    )
    return record


@dataclass(frozen=True)
class _Asked:
    """What a calibration set is asked to be, beside its sources: what its key and record hold."""

    name: str
    mix: dict[str, float]
    samples: int
    seq_len: int
    seed: int
    tokenizer_dir: Path
    chat_template: bool
    allow_contamination: bool


def _source_texts(
    ws: Workspace, sources: Sequence[SourceSpec] | None, mix: dict[str, float], name: str
) -> list[tuple[SourceFile, str]]:
    """The texts of the sources that are not held out; UserError when the mix asks for a language that
    no source has."""
    specs = [s for s in (default_sources() if sources is None else sources) if not s.holdout]
    texts = read_sources(ws, specs)
    check_holdout_unused(ws, texts)
    missing = [lang for lang, share in mix.items() if share > 0 and all(s.lang != lang for s, _ in texts)]
    if missing:
        raise UserError(
            f"calibration mix {name!r} asks for {missing[0]} text but no {missing[0]} source is declared"
        )
    return texts


def _set_key(asked: _Asked, texts: list[tuple[SourceFile, str]], guard: ContaminationGuard | None) -> str:
    """Hash of every input of the set: the same inputs give the same key and the same bytes."""
    return content_hash(
        {
            "builder": BUILDER_VERSION,
            "sources": [source.model_dump(mode="json") for source, _ in texts],
            "mix": asked.mix,
            "samples": asked.samples,
            "seq_len": asked.seq_len,
            "seed": asked.seed,
            "tokenizer": tokenizer_hash(asked.tokenizer_dir),
            "chat_template": asked.chat_template,
            "contamination": None if guard is None else [guard.fingerprint, guard.n],
        }
    )


def _cut_set(
    asked: _Asked, texts: list[tuple[SourceFile, str]], guard: ContaminationGuard | None, samples_path: Path
) -> tuple[CalibrationSet, str]:
    """The set's record and its samples file's text, cut with the target tokenizer."""
    tokenizer = _load_tokenizer(asked.tokenizer_dir)
    where = str(asked.tokenizer_dir)
    framing = chat_framing(tokenizer, where, "--chat-template") if asked.chat_template else Framing()
    cutter = WindowCutter(tokenizer, asked.seq_len, framing, guard)
    lines, dropped = _cut_samples(cutter, texts, asked.mix, asked.samples, asked.seed)
    body = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    record = CalibrationSet(
        name=asked.name,
        mix=asked.mix,
        tokenizer=str(asked.tokenizer_dir),
        samples=asked.samples,
        seq_len=asked.seq_len,
        seed=asked.seed,
        sources=[source for source, _ in texts],
        path=str(samples_path),
        sha256=sha256_of(body),
        dropped=dict(sorted(dropped.items())),
        contamination_items=0 if guard is None else guard.items,
        contamination_allowed=asked.allow_contamination,
        chat_template=asked.chat_template,
        **_measure(lines),
    )
    return record, body


def _load_tokenizer(tokenizer_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


def check_lengths(model: LocalModel, samples: int, seq_len: int, name: str) -> None:
    """Samples (at most MAX_CALIB_SAMPLES) and sequence length are positive, and the length fits the
    model's context."""
    if samples < 1 or seq_len < 16:
        raise UserError(
            f"calibration set {name!r}: need samples ≥ 1, seq_len ≥ 16 (got {samples}, {seq_len})"
        )
    if samples > defaults.MAX_CALIB_SAMPLES:
        raise UserError(
            f"calibration set {name!r}: {samples} samples is more than the "
            f"{defaults.MAX_CALIB_SAMPLES:,} kqe cuts: lower the samples"
        )
    context = model_context(model.folder)
    if context is not None and seq_len > context:
        raise UserError(
            f"calibration --seq-len {seq_len} is above the context of {model.name} "
            f"({context} tokens): lower it"
        )


def _cut_samples(
    cutter: WindowCutter, texts: list[tuple[SourceFile, str]], mix: dict[str, float], samples: int, seed: int
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The sample lines (shuffled under `seed`) and the text dropped, by reason."""
    dropped: Counter[str] = Counter(dict.fromkeys(DROP_REASONS, 0))
    ids: dict[str, list[int]] = {}
    for lang in mix:
        kept, repeats = unique_paragraphs(
            p for source, text in texts if source.lang == lang for p in paragraphs(text)
        )
        dropped["duplicate_paragraphs"] += repeats
        ids[lang] = cutter.tokenizer("\n".join(kept), add_special_tokens=False)["input_ids"]
    lines = []
    for lang, need in allocate(samples, mix).items():
        picked = cutter.choose(ids[lang], lang, need, random.Random(f"{seed}/{lang}"))
        if picked is None:
            raise _too_many_samples(cutter, ids, mix, samples)
        windows, lang_dropped = picked
        dropped.update(lang_dropped)
        for text in windows:
            tokens = len(cutter.tokenizer(text)["input_ids"])  # as the model will see it, specials included
            hangul, letters = hangul_letters(text)
            share = round(hangul / letters, 4) if letters else 0.0
            lines.append({"text": text, "lang": lang, "tokens": tokens, "hangul_fraction": share})
    random.Random(seed).shuffle(lines)
    return lines, dropped


def _measure(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """tokens_by_lang (by source), measured_shares (by Hangul share), Hangul fractions."""
    tokens_by_lang: Counter[str] = Counter()
    measured: Counter[str] = Counter()
    hangul_by: Counter[str] = Counter()
    letters_by: Counter[str] = Counter()
    for line in lines:
        hangul, letters = hangul_letters(line["text"])
        tokens_by_lang[line["lang"]] += line["tokens"]
        measured[measured_lang(line["text"])] += line["tokens"]
        hangul_by[line["lang"]] += hangul
        letters_by[line["lang"]] += letters
    total = sum(tokens_by_lang.values())
    letters_total = sum(letters_by.values())
    return {
        "tokens_by_lang": dict(sorted(tokens_by_lang.items())),
        "measured_shares": {
            lang: round(measured[lang] / total, 4)
            for lang in LANGS
            if lang in tokens_by_lang or measured[lang]
        },
        "hangul_fraction": sum(hangul_by.values()) / letters_total if letters_total else 0.0,
        "hangul_fraction_by_lang": {
            lang: round(hangul_by[lang] / letters_by[lang], 4) if letters_by[lang] else 0.0
            for lang in sorted(letters_by)
        },
    }


def _too_many_samples(
    cutter: WindowCutter, ids: dict[str, list[int]], mix: dict[str, float], samples: int
) -> UserError:
    capacity = {lang: cutter.capacity(ids[lang], lang) for lang, share in mix.items() if share > 0}
    start = min(samples - 1, sum(capacity.values()))  # no more samples fit than windows exist
    fits = (n for n in range(start, 0, -1) if all(allocate(n, mix)[g] <= c for g, c in capacity.items()))
    most = next(fits, 0)
    shown = ", ".join(f"{lang}: {count} windows" for lang, count in capacity.items())
    return UserError(
        f"calibration: {samples} samples of {cutter.seq_len} tokens exceed the sources ({shown}, "
        f"half-overlap allowed); at most {most} samples at this mix: lower the samples or add sources"
    )


def _check_shares(mix: dict[str, float], measured: dict[str, float], name: str, samples: int) -> None:
    for lang, asked in mix.items():
        share = measured.get(lang, 0.0)
        if abs(share - asked) > MAX_SHARE_GAP + 1e-9:
            raise UserError(
                f"calibration mix {name!r}: measured {lang} token share {share:.2f} is more than "
                f"{MAX_SHARE_GAP:.0%} from the asked {asked:.2f} with {samples} samples: use more samples"
            )

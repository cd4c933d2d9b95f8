"""Calibration samples as token windows of the target model: exact lengths, filtered, chosen under a seed.

A sample is a window of a language's token stream whose text re-tokenizes to the same ids, so
llmcompressor sees exactly the tokens that were counted; with a chat template the window is the
user turn and the template's tokens count towards `seq_len`. Byte-level BPE splits Hangul syllables
across tokens, so some cut points decode to broken characters: the start then moves by up to
`MAX_SHIFT` tokens.

Candidate windows are filtered in order, each drop counted under its first reason: `off_language`
(the Hangul share of the window says it is not the language of its source), `contaminated` (shares
an n-gram with an evaluation item), `near_duplicate` (repeats a kept window).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from typing import Any

from kqe.core.chat import Framing
from kqe.core.errors import UserError
from kqe.core.hangul import hangul_letters
from quantize.contamination import ContaminationGuard
from quantize.dedup import NearDuplicates

log = logging.getLogger(__name__)

MAX_SHIFT = 16
KOREAN_MIN_HANGUL = 0.5
"""A window is measured Korean when at least this share of its letters is Hangul, else English."""
DROP_REASONS = ("duplicate_paragraphs", "off_language", "contaminated", "near_duplicate")
"""What a set's manifest counts as left out (paragraphs for the first, windows for the others)."""


def measured_lang(text: str) -> str:
    """`ko` when Hangul makes up at least `KOREAN_MIN_HANGUL` of the letters, else `en`."""
    hangul, letters = hangul_letters(text)
    return "ko" if letters and hangul / letters >= KOREAN_MIN_HANGUL else "en"


class WindowCutter:
    """Cuts and filters windows of `seq_len` model tokens (specials and framing included)."""

    def __init__(
        self, tokenizer: Any, seq_len: int, framing: Framing, guard: ContaminationGuard | None
    ) -> None:
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.framing = framing
        self.guard = guard
        overhead = len(tokenizer(framing.prefix)["input_ids"])
        overhead += len(tokenizer(framing.suffix, add_special_tokens=False)["input_ids"])
        self.length = seq_len - overhead
        """Tokens of source text per window."""
        if self.length < 8:
            raise UserError(
                f"--seq-len {seq_len} leaves {self.length} text tokens after the template: raise it"
            )

    def sample(self, window: list[int]) -> str | None:
        """The sample text of a window of ids, or None when it does not re-tokenize to exactly them."""
        text = self.tokenizer.decode(window, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if self.tokenizer(text, add_special_tokens=False)["input_ids"] != window:
            return None
        framed = self.framing.prefix + text + self.framing.suffix
        framed_len = len(self.tokenizer(framed)["input_ids"]) if framed != text else self.seq_len
        if framed_len != self.seq_len:
            return None
        return framed

    def windows(self, ids: list[int], stride: int) -> list[str]:
        """Sample texts of windows at least `stride` tokens apart, in text order, unfiltered."""
        found = []
        start = 0
        while start + self.length <= len(ids):
            for pos in range(start, min(start + MAX_SHIFT, len(ids) - self.length + 1)):
                text = self.sample(ids[pos : pos + self.length])
                if text is not None:
                    found.append(text)
                    start = pos + stride
                    break
            else:
                start += MAX_SHIFT
        return found

    def usable(self, ids: list[int], stride: int, lang: str) -> tuple[list[str], Counter[str]]:
        """The windows that pass the filters, and the count of those dropped by reason."""
        kept: list[str] = []
        dropped: Counter[str] = Counter()
        repeats = NearDuplicates()
        for text in self.windows(ids, stride):
            if measured_lang(text) != lang:
                dropped["off_language"] += 1
            elif self.guard is not None and self.guard.overlaps(text):
                dropped["contaminated"] += 1
            elif repeats.is_near_duplicate(text):
                dropped["near_duplicate"] += 1
            else:
                kept.append(text)
        return kept, dropped

    def choose(
        self, ids: list[int], lang: str, need: int, rng: random.Random
    ) -> tuple[list[str], Counter[str]] | None:
        """`need` windows: a seeded pick among disjoint ones, else evenly spread half-overlapping ones;
        None when even those are too few. Also the drop counts of the pool used."""
        if need == 0:
            return [], Counter()
        pool, dropped = self.usable(ids, self.length, lang)
        if need <= len(pool):
            return [pool[i] for i in sorted(rng.sample(range(len(pool)), need))], dropped
        pool, dropped = self.usable(ids, max(1, self.length // 2), lang)
        if need > len(pool):
            return None
        log.info(
            "calibration: %d %s windows from %d tokens need overlap (≤ half a window)", need, lang, len(ids)
        )
        step = (len(pool) - 1) / (need - 1) if need > 1 else 0.0
        return [pool[round(i * step)] for i in range(need)], dropped

    def capacity(self, ids: list[int], lang: str) -> int:
        """The most windows `choose` can give for `lang` (half overlap allowed)."""
        return len(self.usable(ids, max(1, self.length // 2), lang)[0])

"""Whether a Korean output code-switches: writes Latin, Han or Kana that its prompt did not give it.

A *foreign run* is a maximal stretch of letters of one script: Latin letters (ASCII, accented and
full-width ones), Han characters (CJK unified ideographs, every extension, and the compatibility
ideographs) or Kana (hiragana, katakana and its phonetic extensions, half-width katakana, the prolonged
sound mark). Digits, punctuation, spaces and Hangul end a run; a script change ends it too, so "GPU는"
holds the run "GPU" and "日本語です" the runs "日本語" and "です".

The rule: an output code-switches when it holds a foreign run that the prompt does not supply.

- A Latin run is supplied when the prompt holds the same word, case-insensitive and compared as whole
  runs (NFKC, so full-width "ＡＰＴ" is "APT"): "APT", "apt" and the option letter "A" of a prompt that
  lists "A." are supplied; "the" is not supplied by a prompt holding only "theory".
- A Han or Kana run is supplied when it occurs anywhere in the prompt's text (NFKC: compatibility
  ideographs and half-width kana read as their unified forms), as these scripts put no spaces between
  words: "國民" copied out of "大韓國民" is supplied.

Limits: a unit or abbreviation the prompt did not write ("5km" to a question without "km") counts as a
switch, as does a proper name written in Latin letters; Greek and Cyrillic letters are not looked for.
Hangul share (the other fidelity signal) is ko_rag's `evals.tasks.ko_rag.korean.hangul_share`.
"""

from __future__ import annotations

import itertools
import unicodedata

LATIN, HAN, KANA = "latin", "han", "kana"
_KANA_RANGES = (
    (0x3041, 0x309F),  # hiragana, its voicing marks and iteration marks
    (0x30A1, 0x30FA),  # katakana letters (0x30FB, the katakana middle dot, is Korean punctuation too)
    (0x30FC, 0x30FF),  # prolonged sound mark, iteration marks, digraph koto
    (0x31F0, 0x31FF),  # katakana phonetic extensions (small letters for Ainu)
    (0xFF66, 0xFF9F),  # half-width katakana and its voicing marks
)


def script(char: str) -> str | None:
    """LATIN, HAN or KANA for a letter of that script; None for anything else (Hangul, digits, marks)."""
    point = ord(char)
    if any(low <= point <= high for low, high in _KANA_RANGES):
        return KANA
    name = unicodedata.name(char, "")
    if name.startswith(("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH")):
        return HAN
    if char.isalpha() and name.startswith(("LATIN ", "FULLWIDTH LATIN ")):
        return LATIN
    return None


def foreign_runs(text: str) -> list[str]:
    """The maximal runs of Latin letters, of Han characters and of Kana in `text`, in order."""
    return ["".join(chars) for kind, chars in itertools.groupby(text, key=script) if kind is not None]


def _latin_words(text: str) -> set[str]:
    """The Latin runs of `text`, NFKC-normalised and case-folded."""
    runs = [run for run in foreign_runs(text) if script(run[0]) == LATIN]
    return {unicodedata.normalize("NFKC", run).casefold() for run in runs}


def unsupplied_runs(output: str, prompt: str) -> list[str]:
    """The foreign runs of `output` that `prompt` does not supply (the module docstring's rule)."""
    words = _latin_words(prompt)
    prompt_text = unicodedata.normalize("NFKC", prompt)
    missing = []
    for run in foreign_runs(output):
        normal = unicodedata.normalize("NFKC", run)
        supplied = normal.casefold() in words if script(run[0]) == LATIN else normal in prompt_text
        if not supplied:
            missing.append(run)
    return missing


def code_switches(output: str, prompt: str) -> bool:
    """Whether `output` holds a Latin word, Han run or Kana run that `prompt` does not supply."""
    return bool(unsupplied_runs(output, prompt))

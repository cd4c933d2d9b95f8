"""The report's perplexity section, from run.json: each checkpoint's change against the base with its
CI and verdict, the calibration effect on perplexity, and the Korean − English gap on parallel text."""

from __future__ import annotations

from evals.reporting.p_values import format_p
from kqe.core.results import PerplexityComparison, PerplexityGap, RunSummary

TEXT_SETS = {
    "ko": "Korean (bills)",
    "en": "English (Botchan)",
    "faq_ko": "Debian FAQ ch. 13–14, Korean",
    "faq_en": "the same, English",
    "lo_ko": "LibreOffice help pages, Korean",
    "lo_en": "the same paragraphs, English",
}
"""Held-out text sets in report order, with what they are."""
KOREAN_IN_WORDS = {"ko": "Korean perplexity", "lo_ko": "Korean perplexity on the help pages"}
"""The Korean text sets the section states in words first."""
GAP_CONTENT = {"faq_ko": "Debian FAQ ch. 13–14, by section", "lo_ko": "LibreOffice help, by page"}
"""What each parallel pair holds in both languages, by its Korean set."""


def _ci(c: PerplexityComparison) -> str:
    return f"{c.delta_pct:+.1f}% [{c.ci_low_pct:+.1f}, {c.ci_high_pct:+.1f}]"


def _sources(c: PerplexityComparison) -> str:
    """What the CI resampled and what the p was judged against (a run before the cluster tests: the
    bootstrap's normal tail, which the documents could not support)."""
    p_from = c.p_method or "normal tail of the bootstrap (an earlier run: too small)"
    return f"{c.ci_method}, {c.clusters} documents; p: {p_from}"


def _table(found: list[PerplexityComparison], reference: str) -> list[str]:
    lines = [
        f"| checkpoint | {reference} | text | ppl | Δ ppl [95% CI] | p | verdict | CI and p from |",
        "|---|---|---|---|---|---|---|---|",
    ]
    order = list(TEXT_SETS)
    for c in sorted(
        found, key=lambda c: (c.candidate, order.index(c.text_set) if c.text_set in order else 9)
    ):
        lines.append(
            f"| {c.candidate} | {c.base} | {TEXT_SETS.get(c.text_set, c.text_set)} | {c.ppl_cand:.2f} | "
            f"{_ci(c)} | {format_p(c.p)} | {c.verdict} | {_sources(c)} |"
        )
    return lines


def _in_words(c: PerplexityComparison, what: str) -> str:
    """One sentence: the change, its CI, and whether the CI tells it from no change."""
    real = c.ci_low_pct > 0 or c.ci_high_pct < 0
    judged = "a real change: the CI excludes 0" if real else "not distinguishable from 0: the CI holds it"
    return f"- {c.candidate}: {what} {_ci(c)} against {c.base}, {judged} ({format_p(c.p, 'p')})."


def perplexity_section(run: RunSummary | None, base: str) -> list[str]:
    """Markdown lines; a pointer to re-run when run.json holds no paired perplexity."""
    found = run.perplexity_comparisons if run else []
    if not found:
        return [
            "No paired perplexity in this run's run.json (it predates per-window NLLs): re-run `make eval`."
        ]
    vs_base = [c for c in found if c.base == base]
    vs_control = [c for c in found if c.base != base]
    margin = found[0].margin_pct
    lines = [
        "Perplexity on held-out text (never in a calibration set), per token of the model's tokenizer; "
        "Δ against the base on the same windows. The CI resamples whole documents (bills, chapters, "
        "FAQ sections, help pages) with both checkpoints paired; p takes the same documents as its "
        "units (an exact sign-flip test up to 12 of them, which no p below 2^(1−K) can come from, "
        "else t with K−1 degrees of freedom); "
        f"verdicts judge against a +{margin:g}% margin.",
        "",
        *[_in_words(c, KOREAN_IN_WORDS[c.text_set]) for c in vs_base if c.text_set in KOREAN_IN_WORDS],
        *[
            _in_words(c, "Korean calibration moved Korean perplexity by")
            for c in vs_control
            if c.text_set == "ko"
        ],
        "",
        *_table(vs_base, "against"),
    ]
    if vs_control:
        lines += [
            "",
            "Calibration effect: the same scheme against its control (least Korean calibration), same "
            "windows (negative: this mix lowered perplexity):",
            "",
            *_table(vs_control, "control"),
        ]
    if run and run.perplexity_gaps:
        lines += ["", *_gap_table(run.perplexity_gaps)]
    return lines


def _gap_table(gaps: list[PerplexityGap]) -> list[str]:
    return [
        "Korean − English perplexity change on the same content (each parallel pair holds the same "
        "documents in both languages, resampled together; positive: Korean lost more):",
        "",
        "| checkpoint | content | Δ Korean | Δ English | gap, points [95% CI] | documents |",
        "|---|---|---|---|---|---|",
        *[
            f"| {g.candidate} | {GAP_CONTENT.get(g.korean, g.korean)} | {g.delta_ko_pct:+.1f}% | "
            f"{g.delta_en_pct:+.1f}% | {g.gap_pct:+.1f} [{g.ci_low:+.1f}, {g.ci_high:+.1f}] | "
            f"{len(g.documents)} |"
            for g in gaps
        ],
    ]

"""Records of scoring and comparing: per-item results, paired comparisons, perplexity, score runs and
the run summary that links every leaderboard number to its files."""

from __future__ import annotations

from pydantic import Field

from kqe.core.capacity import CapacityReport
from kqe.core.eval_config import EvalConfig
from kqe.core.records import SCHEMA_VERSION, CalibrationSet, Checkpoint, MemoryReport, Record, ServeProfile


class ItemResult(Record):
    """One scored item of one checkpoint: a line of a per-item JSON Lines file."""

    task: str
    """Task name, e.g. `kmmlu_hard`."""
    subject: str
    """Subject (cluster) within the task."""
    item_id: str
    """Identifier stable across checkpoints and runs."""
    gold: int
    """Index of the correct choice (generative items: 0, the reference answer)."""
    pred: int
    """Index of the predicted choice (argmax of `choice_logprobs`); generative items: 0 when the answer
    matched the reference exactly, -1 otherwise."""
    correct: bool
    """Whether `pred == gold` (generative items: exact match), what the paired statistics compare."""
    choice_logprobs: list[float]
    """Log-likelihood of each choice's continuation, in choice order, as lm-eval computes it: the
    log-probability of a one-token answer over the full vocabulary, or the sum over the tokens of a
    longer continuation; empty for generative items."""
    pred_norm: int | None = None
    """Index of the highest log-likelihood per character of the choice's text (lm-eval's `acc_norm`);
    None where every choice is one letter, where it is `pred`."""
    prompt_sha: str
    """Short sha256 of the exact prompt text, to prove two checkpoints saw the same prompt."""
    generated: str | None = None
    """Generative items: the text the model generated (before stripping); None for choice items."""
    reference: str | None = None
    """Generative items: the reference answer (the abstention phrase for unanswerable questions)."""
    f1: float | None = None
    """Generative items: morpheme-overlap F1 of the answer against the best accepted answer, in [0, 1]."""
    contains: bool | None = None
    """ko_rag items: whether the answer holds an accepted answer and no conflicting candidate
    (`answer_score.AnswerScore.contains`); None in results scored before it existed."""
    hangul_share: float | None = None
    """Generative items: share of Hangul among the answer's letters, in [0, 1]; None without letters."""
    closed_book: bool | None = None
    """ko_rag open-book items: whether this checkpoint answered the same question exactly without
    documents (its closed-book item); None where that condition was not scored."""
    filtered: str | None = None
    """Generative lm-eval items: the answer after the task's first filter pipeline (lm-eval's
    `filtered_resps`), the text its headline metric scored."""
    metrics: dict[str, float] = Field(default_factory=dict)
    """Generative lm-eval items: every metric value of every filter pipeline, keyed `metric,filter` as
    lm-eval's results name them (`exact_match,extract_answer`)."""
    generated_ids: list[int] | None = None
    """Generative items: the token ids the server generated (their count is the output length; the
    first position where two checkpoints' ids differ is where their outputs part)."""
    finish_reason: str | None = None
    """Generative items: why generation stopped, as the server says (`stop`: a stop string or EOS;
    `length`: the task's max_gen_toks)."""
    code_switch: bool | None = None
    """Outputs of Korean tasks: whether the output holds a run of Latin letters, Han characters or Kana
    that its prompt does not contain; None for English tasks and choice items."""


class Comparison(Record):
    """A candidate checkpoint against the base on the same items of one task (two candidates compared
    this way give the calibration effect)."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    task: str
    """Task name."""
    base: str
    """Base checkpoint name."""
    candidate: str
    """Candidate checkpoint name."""
    n: int
    """Items in common."""
    acc_base: float
    """Base accuracy, fraction in [0, 1]."""
    acc_cand: float
    """Candidate accuracy, fraction in [0, 1]."""
    delta: float
    """acc_cand − acc_base, fraction in [-1, 1]."""
    ci_low: float
    """Lower end of the paired bootstrap 95% CI of delta (see ci_method)."""
    ci_high: float
    """Upper end of that CI."""
    mcnemar_p: float
    """Exact McNemar p-value (two-sided binomial test on the discordant pairs)."""
    mcnemar_midp: float
    """Mid-p variant of the exact McNemar p: the observed split counts half (less conservative, its
    size is close to nominal)."""
    p_holm: float
    """The tested p (the larger of mcnemar_p and cluster_p) after Holm's correction across the tasks
    compared together (one task: unchanged); records written before cluster_p: mcnemar_p's."""
    flips_c2w: int
    """Items the base got right and the candidate got wrong."""
    flips_w2c: int
    """Items the base got wrong and the candidate got right."""
    flip_rate: float
    """(flips_c2w + flips_w2c) / n: share of items whose correctness changed."""
    mean_kl: float | None
    """Mean KL(base ‖ candidate) of the choice distributions, nats; None without log-probs."""
    top_agreement: float | None
    """Share of items where both put their highest log-prob on the same choice; None without log-probs."""
    kl_ci_low: float | None = None
    """Lower end of the 95% CI of mean_kl, resampled as delta's (ci_method); None without log-probs."""
    kl_ci_high: float | None = None
    """Upper end of that CI."""
    top_agreement_ci_low: float | None = None
    """Lower end of the 95% CI of top_agreement (1 − it: the share whose top choice changed)."""
    top_agreement_ci_high: float | None = None
    """Upper end of that CI."""
    recovery: float | None
    """acc_cand / acc_base; None when the base got no item right."""
    recovery_ci_low: float | None
    """Lower end of the bootstrap 95% CI of recovery (the resamples behind the delta CI)."""
    recovery_ci_high: float | None
    """Upper end of that CI."""
    margin: float
    """Non-inferiority margin, fraction (0.01 = one accuracy point): the loss taken as acceptable."""
    noninf_p: float
    """One-sided bootstrap p of H0 "delta ≤ −margin"; small means a loss as large as the margin is
    ruled out."""
    mde: float
    """Minimum detectable effect, fraction: the smallest |delta| the exact McNemar test (two-sided 5%)
    finds with 80% power at this n and flip rate."""
    verdict: str
    """`significant loss` (p_holm < 0.05 and ci_high < 0), else `no loss detected within margin`
    (ci_low > −margin), else `inconclusive — n too small (MDE x points)`."""
    english_task: str | None = None
    """On a Korean task: the English task its loss is contrasted with; None otherwise."""
    ko_en_gap: float | None = None
    """delta of this task − delta of english_task; negative means the Korean side lost more."""
    ko_en_gap_ci_low: float | None = None
    """Lower end of the 95% CI of ko_en_gap (unpaired: each task resampled on its own; matched: the
    matched items resampled together)."""
    ko_en_gap_ci_high: float | None = None
    """Upper end of that CI."""
    ko_en_gap_pairing: str | None = None
    """How ko_en_gap paired the two tasks: `matched items` (a parallel pair, the same questions) or
    `unpaired (different items)`."""
    bootstrap_resamples: int
    """Bootstrap resamples behind the CIs."""
    seed: int
    """Seed of the bootstrap (each task draws its own stream from it)."""
    ci_method: str | None = None
    """How the CIs resampled: `cluster bootstrap` (whole subjects), `item bootstrap (cluster spread
    came out narrower)` (the floor few subjects need) or `item bootstrap` (no subjects); None in records
    written before it was recorded."""
    clusters: int | None = None
    """Subjects the items fall in (1 without subjects); None in records written before it was recorded."""
    cluster_p: float | None = None
    """Two-sided p of "no change" with whole subjects as the units, as the CI resamples them: the exact
    sign-flip test up to 12 subjects (never below 2^(1−K)), else t with K−1 degrees of freedom; the
    verdict judges by the larger of it and mcnemar_p (McNemar treats items as independent). None
    without subjects, and in records written before it was recorded."""
    cluster_p_method: str | None = None
    """How cluster_p was found: `exact sign-flip over K clusters` or `t(K−1) over K clusters`."""
    collapse: str | None = None
    """`collapsed: picks <letter> on N% of items` when the candidate puts its highest log-prob on one
    choice on ≥ 90% of the items and the base does not: then it is the verdict; None otherwise."""
    acc_debiased_base: float | None = None
    """Base accuracy after its letter prior (mean log-prob per choice position, cross-fitted over
    subject folds) is subtracted before the argmax; None without choice log-probs and gold."""
    acc_debiased_cand: float | None = None
    """Candidate accuracy debiased the same way with its own prior."""
    delta_debiased: float | None = None
    """acc_debiased_cand − acc_debiased_base, fraction."""
    delta_debiased_ci_low: float | None = None
    """Lower end of the 95% CI of delta_debiased (the paired bootstrap of delta, ci_method's units)."""
    delta_debiased_ci_high: float | None = None
    """Upper end of that CI."""


class ChoiceProfile(Record):
    """Which choice one checkpoint puts its highest log-prob on, over the items of one multiple-choice
    task, and its accuracy once its letter prior is taken out."""

    checkpoint: str
    """Checkpoint name."""
    task: str
    """Task name."""
    counts: list[int]
    """Items whose highest log-prob is on each choice, in choice order (A, B, …)."""
    top_choice: str
    """The letter of the most frequent choice."""
    top_share: float
    """Share of the items on top_choice, in [0, 1]."""
    acc_debiased: float | None
    """Accuracy after the letter prior is subtracted before the argmax; None without gold."""
    debias_folds: int | None
    """Folds the prior was cross-fitted over (subjects, else items); None without gold."""


class WindowNll(Record):
    """One scored window of held-out text: the unit the paired perplexity bootstrap resamples."""

    document: str
    """Document the window was cut from (a bill, a chapter, a FAQ section): the bootstrap's cluster."""
    tokens: int
    """Tokens scored in the window."""
    nll: float
    """Their summed negative log-likelihood, nats."""


class Perplexity(Record):
    """Perplexity of one served checkpoint on held-out text sets (`ko`, `en`, the parallel
    `faq_ko`/`faq_en` and `lo_ko`/`lo_en`), over fixed token windows."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    checkpoint: str
    """Served checkpoint name."""
    window_tokens: int
    """Tokens per request (BOS included); each window is scored on its own, no overlap."""
    tokens: dict[str, int]
    """Text set → tokens scored (predicted from the tokens before them in their window)."""
    nll: dict[str, float]
    """Text set → summed negative log-likelihood of those tokens, nats."""
    perplexity: dict[str, float]
    """Text set → exp(nll / tokens)."""
    text_sha256: dict[str, str]
    """Text set → sha256 of its documents (before the token cap)."""
    windows: dict[str, list[WindowNll]] = Field(default_factory=dict)
    """Text set → every window scored, in order: what the paired CIs resample."""
    wall_s: float
    """Wall time of the requests, seconds."""


class PerplexityComparison(Record):
    """A checkpoint's perplexity against another's (the base, or its calibration control) on the same
    windows of one held-out text set, with a paired bootstrap CI and a verdict."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    text_set: str
    """Held-out text set (`ko`, `en`, `faq_ko`, `faq_en`, `lo_ko`, `lo_en`)."""
    base: str
    """Reference checkpoint (the base, or the calibration control)."""
    candidate: str
    """Checkpoint compared."""
    windows: int
    """Windows paired."""
    tokens: int
    """Tokens scored in them."""
    ppl_base: float
    """Reference perplexity over these windows."""
    ppl_cand: float
    """Candidate perplexity over these windows."""
    delta_pct: float
    """100 · (ppl_cand / ppl_base − 1): +10.0 is 10% higher perplexity (worse)."""
    ci_low_pct: float
    """Lower end of the paired bootstrap 95% CI of delta_pct (see ci_method)."""
    ci_high_pct: float
    """Upper end of that CI."""
    p: float
    """Two-sided p of "no change" with the CI's units as the units (documents, or windows where the
    CI resamples windows): the exact sign-flip test up to 12 units (never below 2^(1−K)), else t with
    K−1 degrees of freedom (see p_method); records written before p_method: the bootstrap's normal p,
    which fell far below what its documents could support."""
    margin_pct: float
    """Perplexity increase taken as acceptable, percent."""
    verdict: str
    """`significant loss` (p < 0.05, CI above 0), `no loss detected within margin` (CI below
    +margin_pct), else `inconclusive — CI …`."""
    ci_method: str
    """`document bootstrap` (whole documents, never narrower than the windows'), `window bootstrap
    (documents spread narrower)` or `window bootstrap (fewer than 3 documents)`."""
    clusters: int
    """Documents the windows come from."""
    bootstrap_resamples: int
    """Bootstrap resamples behind the CI."""
    seed: int
    """Seed of the bootstrap."""
    p_method: str | None = None
    """How p was found: `exact sign-flip over K documents`, `t(K−1) over K documents` (or windows);
    None in records written before it was recorded."""


class PerplexityGap(Record):
    """How much more a checkpoint's perplexity rose on Korean than on English on the same content:
    a parallel pair's held-out documents (the Debian FAQ's sections, LibreOffice's help pages), each
    scored in both languages."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    base: str
    """Reference checkpoint."""
    candidate: str
    """Checkpoint compared."""
    korean: str
    """Korean text set (`faq_ko`, `lo_ko`)."""
    english: str
    """English text set with the same documents (`faq_en`, `lo_en`)."""
    documents: list[str]
    """Documents (sections, pages) scored in both languages: the units resampled (both together)."""
    delta_ko_pct: float
    """Korean perplexity change, percent."""
    delta_en_pct: float
    """English perplexity change on the same documents, percent."""
    gap_pct: float
    """delta_ko_pct − delta_en_pct, percentage points: positive means Korean lost more."""
    ci_low: float
    """Lower end of the paired bootstrap 95% CI of gap_pct (documents resampled)."""
    ci_high: float
    """Upper end of that CI."""
    bootstrap_resamples: int
    """Bootstrap resamples behind the CI."""
    seed: int
    """Seed of the bootstrap."""


class ScoreRun(Record):
    """Summary of scoring one checkpoint on one task through one server."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    checkpoint: str
    """Checkpoint name."""
    task: str
    """Task name."""
    n_items: int
    """Items scored (resumed items included)."""
    accuracy: float
    """Fraction correct."""
    accuracy_norm: float | None = None
    """Fraction correct by `pred_norm` (lm-eval's `acc_norm`); None when no item has one."""
    items_per_s: float | None
    """Scoring speed of the items scored in this run; None when everything was resumed."""
    items_path: str
    """Per-item JSON Lines file."""
    profile_key: str
    """Hash of the serve profile used."""
    generated: bool = False
    """Whether its items were generated (ko_rag's answers, an lm-eval generation task): its rate is then
    no letter-choice scoring rate."""


class RunSummary(Record):
    """`results/<model>/run.json`: what one `make eval` did, linking every leaderboard number to its files."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    config: EvalConfig
    """What the run computed (a run.json written before a field existed reads it at its default)."""
    command: str
    """Command that reproduces the run."""
    wall_s: float
    """Wall time of the whole run, seconds."""
    calibrations: dict[str, CalibrationSet]
    """Mix label → calibration set, for the mixes some scheme of the run was built with."""
    profile: ServeProfile
    """Serve profile applied to every checkpoint."""
    checkpoints: list[Checkpoint]
    """Checkpoints that were built (or reused)."""
    failures: dict[str, str]
    """Checkpoint name → why it has no scores."""
    score_runs: list[ScoreRun]
    """Per checkpoint and task: accuracy, items/s and the per-item file."""
    comparisons: list[Comparison]
    """Per candidate and task: the paired comparison with the base, and with the same scheme's
    calibration control where the run has one (`base` is then that control)."""
    memory: dict[str, MemoryReport]
    """Checkpoint name → what vLLM reserved for it."""
    multiplicity: str = "holm-per-checkpoint"
    """How p_holm and the verdicts were adjusted for many tests: `holm-per-checkpoint` (across the
    tasks of each checkpoint), `holm` or `bh` (Holm, or Benjamini–Hochberg's false discovery rate,
    across every checkpoint × task against the base)."""
    perplexity_comparisons: list[PerplexityComparison] = Field(default_factory=list)
    """Per candidate and held-out text set: its perplexity against the base's, and against its
    calibration control's where the run has one."""
    perplexity_gaps: list[PerplexityGap] = Field(default_factory=list)
    """Per candidate and parallel pair: the Korean − English perplexity change on its documents."""
    built: list[str] = Field(default_factory=list)
    """Checkpoints this run built (the others were reused from earlier runs)."""
    served: list[str] = Field(default_factory=list)
    """Checkpoints this run started a server for (the others had every stage scored already)."""
    capacity: dict[str, CapacityReport] = Field(default_factory=dict)
    """Checkpoint name → its `vllm bench serve` levels (1, a step, max-num-seqs), where measured."""
    choices: list[ChoiceProfile] = Field(default_factory=list)
    """Per checkpoint and multiple-choice task: its choice distribution and letter-debiased accuracy."""
    load_failures: dict[str, str] = Field(default_factory=dict)
    """Checkpoint name → why `vllm bench serve` did not measure it when the run asked (its scores stand)."""

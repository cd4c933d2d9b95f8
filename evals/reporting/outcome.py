"""What a leaderboard row is built from: one checkpoint's outcome, and what the run found about it.

In memory only: the files behind every field (checkpoint.json, score and memory stages, per-item
files) are the records; `CheckpointResult` bundles them, in one typed part per stage, for
`leaderboard.build_row`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evals.planning.placement import Placement
from evals.statistics.averages import TaskSummary
from evals.statistics.circular import CircularScores
from evals.statistics.generation_findings import GenerationFindings
from evals.statistics.perplexity_stats import PerplexityFindings
from evals.statistics.rag_findings import RagFindings
from kqe.core.capacity import CapacityReport
from kqe.core.records import Checkpoint, MemoryReport, ServeProfile
from kqe.core.results import ChoiceProfile, Comparison, ItemResult, ScoreRun


@dataclass(frozen=True)
class CheckpointOutcome:
    """What evaluating one checkpoint of a run left: its status and whatever stages finished."""

    model: str
    """Registry name of the model."""
    name: str
    """Checkpoint name in the matrix (`awq-w4a16-ko70`)."""
    scheme: str
    """Scheme it was (or would have been) built with."""
    calibration: str
    """Calibration mix label, or `none`."""
    status: str
    """`ok`, or why it has no (or only some) scores."""
    checkpoint: Checkpoint | None = None
    """The built or found checkpoint; None when nothing was built."""
    runs: dict[str, ScoreRun] = field(default_factory=dict)
    """Task → its score run."""
    memory: MemoryReport | None = None
    """What vLLM reserved where its items were scored."""
    items: dict[str, list[ItemResult]] = field(default_factory=dict)
    """Task → per-item results."""
    circular: dict[str, list[ItemResult]] = field(default_factory=dict)
    """Task → results of its `--circular` rotations (`<item_id>@rot<r>`); empty without it."""
    built: bool = False
    """Whether this run built it (False: reused, found, or not built at all)."""
    served: bool = False
    """Whether this run started a server for it (False: every stage was scored already)."""
    load_failure: str | None = None
    """Why its load was not measured when the run asked for it (`vllm bench serve`'s error)."""


@dataclass(frozen=True)
class TaskFindings:
    """What the run found per task: paired comparisons and averages."""

    vs_base: dict[str, Comparison] = field(default_factory=dict)
    """Task → paired comparison with the base (empty for the base itself)."""
    calibration_control: str | None = None
    """The same scheme calibrated with the least Korean, when the run has one."""
    vs_control: dict[str, Comparison] = field(default_factory=dict)
    """Task → paired comparison with `calibration_control`: the calibration effect."""
    kv_control: str | None = None
    """For a row served with a non-auto KV dtype (`bf16+kv-fp8`): the same weights served at auto."""
    vs_kv_control: dict[str, Comparison] = field(default_factory=dict)
    """Task → paired comparison with `kv_control`: the KV cache's quality cost alone."""
    averages: dict[str, TaskSummary] = field(default_factory=dict)
    """Task → micro, macro and supercategory averages and the macro Δ, for every task of the run."""
    choices: dict[str, ChoiceProfile] = field(default_factory=dict)
    """Task → the checkpoint's choice distribution and letter-debiased accuracy (multiple-choice tasks)."""
    circular: dict[str, CircularScores] = field(default_factory=dict)
    """Task → CircularEval accuracy on its `--circular` items, with its Δ against the base's."""

    def paired(self) -> list[Comparison]:
        """Every paired comparison: with the base, the calibration control and the same weights at auto KV."""
        return [*self.vs_base.values(), *self.vs_control.values(), *self.vs_kv_control.values()]


@dataclass(frozen=True)
class CheckpointResult:
    """Everything a run says about one checkpoint, in typed parts, each from the stage that found it;
    `evals/reporting` alone turns it into a leaderboard row."""

    outcome: CheckpointOutcome
    """What evaluating it left: status, checkpoint, score runs, items."""
    profile: ServeProfile
    """The profile its items were scored under."""
    command: str
    """Command that reproduces the run."""
    memory: MemoryReport | None = None
    """The memory columns' source: vLLM's log where it was scored, or the planner's for the target."""
    base_memory: MemoryReport | None = None
    """The base's memory on the same footing, for the savings columns."""
    tasks: TaskFindings = field(default_factory=TaskFindings)
    """Accuracy comparisons and averages per task."""
    perplexity: PerplexityFindings | None = None
    """Perplexity and its changes, where it was scored."""
    rag: RagFindings | None = None
    """ko_rag's scores, when the run had ko_rag."""
    generation: dict[str, GenerationFindings] = field(default_factory=dict)
    """Generative task → its outputs' divergence from the base's and their Korean fidelity."""
    placement: Placement | None = None
    """Where it was scored and whether it fits the target GPU."""
    capacity: CapacityReport | None = None
    """Capacity under load, where it was measured."""
    engine_versions: dict[str, str] = field(default_factory=dict)
    """Serving engine, lm-eval and kernel library versions."""
    serving: str | None = None
    """How this machine's engine serves the checkpoint (native, dequantized, …)."""

"""ko_rag's prompt text and its token budget: the templates, and a context of passages cut to fit
one sweep length, counted with the target model's tokenizer; with `--rag-chat-template` each whole
prompt is the user turn of the model's chat template, the assistant's turn opened after it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evals.tasks.ko_rag import retrieval as rag_retrieval
from evals.tasks.ko_rag.docs import Passage
from evals.tasks.prompt_tokens import ChoiceTokenizer
from kqe.core.chat import Framing, chat_framing

MAX_NEW_TOKENS = 32
"""Answer room: greedy generation stops here (or at a newline)."""
ABSTAIN = "답할 수 없음"
INSTRUCTION = (
    "다음 문서를 읽고 질문에 답하세요. 답은 문서에 나온 짧은 구절로만 쓰고, "
    f'문서에 답이 없으면 "{ABSTAIN}"이라고 쓰세요.\n\n'
)
CLOSED_BOOK_INSTRUCTION = (
    f'질문에 답하세요. 답은 짧은 구절로만 쓰고, 답을 모르면 "{ABSTAIN}"이라고 쓰세요.\n\n'
)
"""The closed-book condition's instruction: the same answer form, no documents."""
PASSAGE = "[문서] {title}\n{text}\n\n"
GEN_SUFFIX = "질문: {question}\n답:"
MC_SUFFIX = "질문: {question}\nA. {0}\nB. {1}\nC. {2}\nD. {3}\n정답:"
LETTERS = "ABCD"


def render_context(passages: Sequence[Passage]) -> str:
    """The instruction and the passages: the shared prefix of both prompts."""
    return INSTRUCTION + "".join(PASSAGE.format(title=p.title, text=p.text) for p in passages)


@dataclass(frozen=True)
class Budgeter:
    """Token counts of the target model: `encode` gives a whole prompt's ids (BOS included), framed by
    `frame` (the chat template's user turn, or nothing) as the prompts are."""

    encode: Callable[[str], list[int]]
    encode_plain: Callable[[str], list[int]]
    """Ids without special tokens, for sizing one passage."""
    frame: Framing = field(default_factory=Framing)

    def sizes(self, passages: Sequence[Passage]) -> dict[str, int]:
        return {p.id: len(self.encode_plain(PASSAGE.format(title=p.title, text=p.text))) for p in passages}

    def need(self, context: str, gen_suffix: str, mc_suffix: str) -> tuple[int, int]:
        """(tokens a length must hold, gen prompt tokens): the longer of the generation prompt plus
        its answer room and the multiple-choice prompt plus one letter."""
        gen = len(self.encode(self.frame.wrap(context + gen_suffix)))
        return max(gen + MAX_NEW_TOKENS, len(self.encode(self.frame.wrap(context + mc_suffix))) + 1), gen


def fit_context(
    plan: rag_retrieval.ContextPlan,
    passages: dict[str, Passage],
    budgeter: Budgeter,
    suffixes: tuple[str, str],
    length: int,
    sizes: dict[str, int],
) -> tuple[rag_retrieval.ContextPlan, int]:
    """The plan cut to fit `length` exactly, and its generation prompt's token count."""
    counted: dict[tuple[str, ...], tuple[int, int]] = {}

    def need(ids: Sequence[str]) -> int:
        context = render_context([passages[pid] for pid in ids])
        counted[tuple(ids)] = budgeter.need(context, *suffixes)
        return counted[tuple(ids)][0]

    fitted = rag_retrieval.fit_plan(plan, need, length, sizes)
    return fitted, counted[fitted.passage_ids][1]


def hf_budgeter(tokenizer_dir: Path, chat_template: bool = False) -> Budgeter:
    """Token counts with the checkpoint's tokenizer, encoded the way lm-eval's hf model encodes; with
    `chat_template`, prompts framed by its chat template (a UserError when it has none)."""
    tokenizer = ChoiceTokenizer(tokenizer_dir)
    where, flag = str(tokenizer_dir), "--rag-chat-template"
    frame = (
        chat_framing(tokenizer.tokenizer, where, flag, generation_prompt=True) if chat_template else Framing()
    )
    return Budgeter(
        tokenizer.tok_encode,
        lambda text: list(tokenizer.tokenizer.encode(text, add_special_tokens=False)),
        frame,
    )

"""Korean workloads for `vllm bench serve`, written as its `custom` JSONL datasets (`{"prompt": …}` a line):
retrieved passages of the offline Korean sources and a question, of a set token length.

`rag`: every request gets its own passage order and starts at its own token of its first passage, so
prompts share no prefix beyond the instruction and the prefix cache cannot make the load trivial.
`shared-prefix`: one fixed document set (a long Korean system prompt) before every question, the
guide's repeated 4K+ system prompt; on a profile with a shorter max-model-len it is cut to fit, and
the record says how long it was.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kqe.core.capacity import Workload
from kqe.core.errors import UserError
from kqe.core.io import write_atomic

INSTRUCTION = "다음은 검색된 문서입니다. 문서의 내용만 근거로 하여 질문에 한국어로 답하세요.\n\n"
QUESTIONS = (
    "대한민국의 주권은 누구에게 있습니까?",
    "위 문서에 따르면 이 법률안을 제안한 이유는 무엇입니까?",
    "국회의원의 임기는 몇 년입니까?",
    "이 법률안은 누가 대표발의하였습니까?",
    "대통령의 권한과 의무를 세 문장으로 요약해 주세요.",
    "개정안의 주요 내용을 항목별로 정리해 주세요.",
    "문서에서 언급된 시행일은 언제입니까?",
    "국민의 기본권 가운데 두 가지를 예로 들어 설명해 주세요.",
)
_PAGE_MARK = re.compile(r"^-\s*\d+\s*-$")  # "- 1 -" page numbers of the bills


def korean_passages(texts: Mapping[str, str], chars: int = 600) -> list[str]:
    """Retrieval-sized passages of about `chars` characters, each headed by its document's title."""
    passages = []
    for text in texts.values():
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        lines = [line for line in lines if not _PAGE_MARK.match(line)]
        if not lines:
            continue
        title, body = lines[0], lines[1:]
        chunk: list[str] = []
        for number, line in enumerate(body, 1):
            chunk.append(line)
            if sum(map(len, chunk)) >= chars or number == len(body):
                passages.append(f"[문서: {title}]\n" + "\n".join(chunk) + "\n\n")
                chunk = []
    return passages


@dataclass(frozen=True)
class RagPrompts:
    """Tokenized pieces of RAG prompts; `ids(index, target)` assembles request `index`'s prompt."""

    head: list[int]
    """BOS (when the tokenizer adds one) and the instruction."""
    passages: list[list[int]]
    questions: list[list[int]]
    seed: int
    shared_prefix: bool

    @classmethod
    def build(
        cls, passages: list[str], encode: Callable[[str], list[int]], bos: list[int], seed: int, shared: bool
    ) -> RagPrompts:
        if not passages:
            raise UserError("no Korean source text to build prompts from: run `make setup`")
        questions = [encode(f"질문: {question}\n답변:") for question in QUESTIONS]
        return cls(bos + encode(INSTRUCTION), [encode(p) for p in passages], questions, seed, shared)

    def shortest(self) -> int:
        """Fewest prompt tokens that still hold one passage token."""
        return len(self.head) + max(map(len, self.questions)) + 1

    def ids(self, index: int, target: int) -> list[int]:
        """Prompt `index`, exactly `target` tokens: passages in an order drawn for `index` (or one fixed
        order when prefixes are shared) from a drawn token of the first one, the last one cut to fit,
        repeated if the sources run out."""
        if target < self.shortest():
            raise UserError(f"--prompt-tokens {target}: prompts need at least {self.shortest()} tokens")
        rng = random.Random(self.seed if self.shared_prefix else self.seed * 1_000_003 + index)
        order = rng.sample(range(len(self.passages)), len(self.passages))
        # starting inside the first passage keeps prompts apart once every passage has led one
        first = self.passages[order[0]][rng.randrange(len(self.passages[order[0]])) :]
        rest = (self.passages[i] for i in itertools.cycle(order[1:] + order[:1]))
        question = self.questions[index % len(self.questions)]
        budget = target - len(self.head) - len(question)
        body: list[int] = []
        for passage in itertools.chain([first], rest):
            body += passage[: budget - len(body)]
            if len(body) == budget:
                return self.head + body + question
        raise AssertionError("unreachable")


SHARED_PREFIX_TOKENS = 4096
"""The guide's repeated system prompt: 4K tokens (cut to the profile's max-model-len)."""
RETOKENIZE_SLACK = 0.03
"""Prompts travel as text and are tokenized again by client and server: keep this share of room."""


@dataclass(frozen=True)
class WorkloadFile:
    """A written workload: the JSONL `vllm bench serve --dataset-name custom` reads, and its sizes."""

    path: Path
    workload: Workload
    tokenizer_dir: Path
    """Tokenizer the prompts were sized with (the client counts tokens with it too)."""
    prompt_tokens: int
    shared_prefix_tokens: int
    max_tokens: int


def prompt_budget(workload: Workload, max_model_len: int, max_tokens: int, rag_tokens: int) -> int:
    """Prompt tokens that fit the profile: `rag_tokens` for `rag`, the 4K system prompt and a question for
    `shared-prefix`; UserError when not even a short prompt fits."""
    room = math.floor((max_model_len - max_tokens) * (1 - RETOKENIZE_SLACK))
    wanted = rag_tokens if workload == "rag" else SHARED_PREFIX_TOKENS + 64
    if room < 64:
        raise UserError(
            f"max-model-len {max_model_len} leaves no room for prompts beside {max_tokens} output tokens"
        )
    return min(wanted, room)


@dataclass(frozen=True)
class PromptSource:
    """A workload's prompts, numbered: each benchmark run gets a file of prompts no run before it sent, so
    one level never finds another's prompts in the prefix cache."""

    prompts: RagPrompts
    decode: Callable[[list[int]], str]
    workload: Workload
    tokenizer_dir: Path
    prompt_tokens: int
    max_tokens: int

    def write(self, out: Path, start: int, count: int) -> WorkloadFile:
        """Prompts `start`… `start + count - 1` as a custom-dataset JSONL at `out`."""
        lines = [
            json.dumps(
                {"prompt": self.decode(self.prompts.ids(index, self.prompt_tokens))}, ensure_ascii=False
            )
            for index in range(start, start + count)
        ]
        write_atomic(out, "\n".join(lines) + "\n")
        questions = max(map(len, self.prompts.questions))
        shared = self.prompt_tokens - questions if self.workload == "shared-prefix" else 0
        return WorkloadFile(
            out, self.workload, self.tokenizer_dir, self.prompt_tokens, shared, self.max_tokens
        )


def prompt_source(
    tokenizer_dir: Path,
    texts: Mapping[str, str],
    workload: Workload,
    prompt_tokens: int,
    max_tokens: int,
    seed: int,
) -> PromptSource:
    """The prompts of `workload`, `prompt_tokens` tokens each, cut from `texts` with `tokenizer_dir`'s
    tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids))

    # no BOS in the text: the server adds the model's own when it tokenizes the prompt
    prompts = RagPrompts.build(korean_passages(texts), encode, [], seed, workload == "shared-prefix")
    return PromptSource(prompts, decode, workload, tokenizer_dir, prompt_tokens, max_tokens)

"""Prompts as token ids, encoded the way lm-eval's `hf` model encodes them (`HFLM.tok_encode` and
`TemplateLM._encode_pair`), and a prompt's identity (its sha): the scorers send these ids, and ko_rag
counts them to fit its contexts to a length."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

from evals.tasks.prompts import PromptItem
from kqe.core.errors import UserError


@dataclass(frozen=True)
class EncodedItem:
    """A prompt as token ids: the context sent to the server and the one token of each choice."""

    item: PromptItem
    context_ids: list[int]
    choice_ids: list[int]


class ChoiceTokenizer:
    """A checkpoint's tokenizer, loaded once, encoding items the way lm-eval's `hf` model does."""

    def __init__(self, tokenizer_dir: Path) -> None:
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        prefix_id = self.tokenizer.bos_token_id
        prefix_id = self.tokenizer.eos_token_id if prefix_id is None else prefix_id
        self._prefix_text: str | None = None if prefix_id is None else str(self.tokenizer.decode(prefix_id))

    def tok_encode(self, text: str) -> list[int]:
        """`HFLM.tok_encode` with lm-eval's default `add_bos_token=None`: the tokenizer's own special
        tokens (Llama and Gemma tokenizers add BOS), none when the text already starts with BOS."""
        if self._prefix_text and text.startswith(self._prefix_text):
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        return list(self.tokenizer.encode(text))

    def encode_pairs(self, context: str, continuations: tuple[str, ...]) -> tuple[list[int], list[list[int]]]:
        """`TemplateLM._encode_pair` (causal models) of the context with each continuation, encoding
        the shared context once."""
        n_spaces = len(context) - len(context.rstrip())
        moved = context[len(context) - n_spaces :]
        context = context[: len(context) - n_spaces]
        context_ids = self.tok_encode(context)
        wholes = [self.tok_encode(context + moved + continuation) for continuation in continuations]
        return context_ids, [whole[len(context_ids) :] for whole in wholes]

    def encode(self, item: PromptItem) -> EncodedItem:
        """Context ids and the one token of each choice; UserError when a choice is not one token."""
        context_ids, continuation_ids = self.encode_pairs(item.prompt, item.continuations)
        for continuation, ids in zip(item.continuations, continuation_ids, strict=True):
            if len(ids) != 1:
                raise UserError(
                    f"{item.item_id}: choice {continuation!r} is {len(ids)} tokens for this tokenizer; "
                    "the server scorer needs one-token choices: use lm_eval for this model"
                )
        choice_ids = [ids[0] for ids in continuation_ids]
        return EncodedItem(item=item, context_ids=context_ids, choice_ids=choice_ids)


@functools.lru_cache(maxsize=4)
def choice_tokenizer(tokenizer_dir: Path) -> ChoiceTokenizer:
    """The ChoiceTokenizer of a folder, loaded once per process: a 262k-token vocabulary takes
    seconds to load, and every task of a checkpoint needs it."""
    return ChoiceTokenizer(tokenizer_dir)


def prompt_sha(prompt: str) -> str:
    """Short sha256 of a prompt's text."""
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]

"""A tokenizer's chat template as text around one user turn: calibration samples (quantize) and
ko_rag prompts for instruct checkpoints (evals) are framed the same way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kqe.core.errors import UserError

_MARKER = "\ufffcKQE-SAMPLE\ufffc"


@dataclass(frozen=True)
class Framing:
    """Text around every sample: the chat template's user turn, or nothing."""

    prefix: str = ""
    suffix: str = ""

    def wrap(self, text: str) -> str:
        return self.prefix + text + self.suffix


def chat_framing(tokenizer: Any, where: str, flag: str, generation_prompt: bool = False) -> Framing:
    """The user turn of the tokenizer's chat template around a sample (with `generation_prompt`, the
    assistant's turn opened after it); BOS left to the tokenizer. `flag` is the option to drop when
    the tokenizer has no template."""
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(f"{where} has no chat template: drop {flag} or use an instruct model")
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": _MARKER}], tokenize=False, add_generation_prompt=generation_prompt
    )
    prefix, _, suffix = str(rendered).partition(_MARKER)
    bos = tokenizer.bos_token
    # templates write BOS and the tokenizer adds one again: keep one, the tokenizer's
    if bos and prefix.startswith(bos) and tokenizer("")["input_ids"][:1] == [tokenizer.bos_token_id]:
        prefix = prefix[len(bos) :]
    return Framing(prefix, suffix)

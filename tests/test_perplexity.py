"""Perplexity through `vllm serve` against a hand computation and an HF float32 forward pass.

Reference test: the tiny model is served in float32 and run by HF in float32 on the same windows, so
the two differ only by kernels: the summed NLLs agreed to ~2e-5 nats over ~1.5k tokens (relative
2e-9, measured); TOLERANCE allows 1e-6 relative.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evals.scoring.perplexity import (
    document_windows,
    measure_perplexity,
    perplexity_of,
    prompt_token_logprobs,
    token_windows,
)
from evals.statistics.perplexity_stats import relative_change
from kqe.core.results import Perplexity
from kqe.core.workspace import Workspace
from tests.helpers.prose import english_prose, korean_prose
from tests.helpers.repo import REPO
from tests.helpers.serve_env import needs_serve_env

TOLERANCE = 1e-6
"""Largest relative difference of a language's summed NLL, server vs HF, both float32."""
WINDOW = 96


def test_windows_start_with_bos_and_cover_every_token_once() -> None:
    ids = list(range(10, 33))
    windows = token_windows(ids, [1], 8)
    assert windows == [[1, *range(10, 17)], [1, *range(17, 24)], [1, *range(24, 31)], [1, 31, 32]]
    assert token_windows(ids, [], 8)[0] == list(range(10, 18))
    with pytest.raises(ValueError, match="no room"):
        token_windows(ids, [1], 1)


def test_prompt_logprobs_are_read_for_the_prompt_tokens() -> None:
    ids = [1, 7, 9]
    entries = [None, {"7": {"logprob": -2.5, "rank": 3}}, {"4": {"logprob": -0.1}, "9": {"logprob": -1.0}}]
    assert prompt_token_logprobs({"choices": [{"prompt_logprobs": entries}]}, ids) == [-2.5, -1.0]
    with pytest.raises(RuntimeError, match="lacks the prompt token 9 at position 2"):
        prompt_token_logprobs(
            {"choices": [{"prompt_logprobs": [*entries[:2], {"4": {"logprob": -0.1}}]}]}, ids
        )
    with pytest.raises(RuntimeError, match="2 entries for a prompt of 3 tokens"):
        prompt_token_logprobs({"choices": [{"prompt_logprobs": entries[:2]}]}, ids)
    with pytest.raises(RuntimeError, match="no prompt_logprobs"):
        prompt_token_logprobs({"choices": []}, ids)


def test_perplexity_is_the_exponent_of_the_mean_nll() -> None:
    # four tokens with probabilities 1/2, 1/4, 1/8, 1/16: mean NLL = 2.5 ln 2, perplexity 2^2.5
    logprobs = [math.log(p) for p in (1 / 2, 1 / 4, 1 / 8, 1 / 16)]
    assert perplexity_of(-sum(logprobs), len(logprobs)) == pytest.approx(2**2.5, rel=1e-12)


def _record(name: str, ko: float, en: float, text: str = "x", window: int = 512) -> Perplexity:
    return Perplexity(
        checkpoint=name,
        window_tokens=window,
        tokens={"ko": 10, "en": 10},
        nll={"ko": 1.0, "en": 1.0},
        perplexity={"ko": ko, "en": en},
        text_sha256={"ko": text, "en": "y"},
        wall_s=1.0,
    )


def test_relative_change_gives_the_change_against_the_base_in_percent() -> None:
    base = _record("bf16", 12.0, 20.0)
    assert relative_change(_record("awq", 15.0, 19.0), base) == {"ko": 25.0, "en": -5.0}
    assert relative_change(base, base) == {}, "the base row has no Δ"
    assert relative_change(_record("awq", 15.0, 19.0, text="z"), base) == {"en": -5.0}
    assert relative_change(_record("awq", 15.0, 19.0, window=256), base) == {}
    assert relative_change(None, base) == {}


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from evals.serving.serve import VllmServer, load_profile

    base = tmp_path_factory.mktemp("perplexity")
    ws = Workspace(root=base, cache=base / "cache", serve_venv=REPO / ".venv-serve")
    profile = load_profile("cpu-ci").model_copy(update={"dtype": "float32"})
    with VllmServer(tiny_model_dir, "tiny", profile, ws, base / "tiny.log") as running:
        yield running


def hf_nll(model_dir: Path, windows: list[list[int]]) -> tuple[float, int]:
    """Summed NLL and token count of the windows by an HF float32 forward pass."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    nll, count = 0.0, 0
    with torch.no_grad():
        for window in windows:
            logprobs = torch.log_softmax(model(torch.tensor([window])).logits[0], dim=-1)
            targets = torch.tensor(window[1:])
            nll -= logprobs[:-1].gather(1, targets[:, None]).sum().item()
            count += len(targets)
    return nll, count


class CharTokenizer:
    """One token per character, BOS 1 first: enough to count windows."""

    bos_token_id = 1

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        ids = [ord(c) for c in text]
        return {"input_ids": ([1] if add_special_tokens else []) + ids}


def test_a_sets_budget_is_split_over_its_documents_in_whole_windows_but_parallel_sets_are_whole() -> None:
    documents = {"ko": {"a": "x" * 50, "b": "y" * 10}, "faq_ko": {"13.1": "z" * 50}, "lo_en": {"p": "w" * 40}}
    windows = document_windows(CharTokenizer(), documents, window_tokens=8, max_tokens=30)
    keys = {(w.text_set, w.document) for w in windows}
    scored = {key: sum(len(w.ids) - 1 for w in windows if (w.text_set, w.document) == key) for key in keys}
    # 30 tokens over 2 documents: 15 each, in whole windows of 7 → 14; a short document keeps all it has
    assert scored == {("ko", "a"): 14, ("ko", "b"): 10, ("faq_ko", "13.1"): 50, ("lo_en", "p"): 40}
    assert all(w.ids[0] == 1 and len(w.ids) <= 8 for w in windows)


@pytest.mark.slow
@needs_serve_env
def test_server_perplexity_matches_hf_float32(server: Any, tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    documents = {
        "ko": {"one": korean_prose(1, 3), "two": korean_prose(3, 3)},
        "en": {"chapter": english_prose(2, 8)},
    }
    result = measure_perplexity(server.endpoint, tiny_model_dir, documents, window_tokens=WINDOW)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for text_set, docs in documents.items():
        nll, count, ids_count, windows = 0.0, 0, 0, []
        for name, text in docs.items():
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            doc_windows = token_windows(ids, [tokenizer.bos_token_id], WINDOW)
            doc_nll, doc_count = hf_nll(tiny_model_dir, doc_windows)
            nll, count, ids_count = nll + doc_nll, count + doc_count, ids_count + len(ids)
            windows += [(name, len(w) - 1) for w in doc_windows]
        assert result.tokens[text_set] == count == ids_count, "every token scored once, BOS never"
        assert [(w.document, w.tokens) for w in result.windows[text_set]] == windows
        assert result.nll[text_set] == pytest.approx(nll, rel=TOLERANCE)
        assert sum(w.nll for w in result.windows[text_set]) == pytest.approx(nll, rel=TOLERANCE)
        assert result.perplexity[text_set] == pytest.approx(math.exp(nll / count), rel=TOLERANCE)
    assert result.window_tokens == WINDOW and result.checkpoint == "tiny"
    capped = measure_perplexity(
        server.endpoint,
        tiny_model_dir,
        {"en": documents["en"]},
        window_tokens=WINDOW,
        max_tokens=WINDOW - 1,
    )
    assert capped.tokens == {"en": WINDOW - 1}

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
    leaderboard_cells,
    measure_perplexity,
    perplexity_of,
    prompt_token_logprobs,
    token_windows,
)
from kqe.core.results import Perplexity
from kqe.core.workspace import Workspace
from tests.conftest import REPO, needs_serve_env
from tests.test_calibration import english_prose, korean_prose

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
        checkpoint=name, window_tokens=window, tokens={"ko": 10, "en": 10}, nll={"ko": 1.0, "en": 1.0},
        perplexity={"ko": ko, "en": en}, text_sha256={"ko": text, "en": "y"}, wall_s=1.0,
    )  # fmt: skip


def test_leaderboard_cells_give_the_change_against_the_base_in_percent() -> None:
    base = _record("bf16", 12.0, 20.0)
    assert leaderboard_cells(_record("awq", 15.0, 19.0), base) == {
        "ppl_ko": 15.0, "ppl_ko_delta_pct": 25.0, "ppl_en": 19.0, "ppl_en_delta_pct": -5.0,
    }  # fmt: skip
    assert leaderboard_cells(base, base)["ppl_ko_delta_pct"] is None, "the base row has no Δ"
    other_text = leaderboard_cells(_record("awq", 15.0, 19.0, text="z"), base)
    assert other_text["ppl_ko_delta_pct"] is None and other_text["ppl_en_delta_pct"] == -5.0
    assert leaderboard_cells(_record("awq", 15.0, 19.0, window=256), base)["ppl_en_delta_pct"] is None
    assert leaderboard_cells(None, base) == dict.fromkeys(
        ("ppl_ko", "ppl_ko_delta_pct", "ppl_en", "ppl_en_delta_pct")
    )


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


@pytest.mark.slow
@needs_serve_env
def test_server_perplexity_matches_hf_float32(server: Any, tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    texts = {"ko": korean_prose(1, 6), "en": english_prose(2, 8)}
    result = measure_perplexity(server.endpoint, tiny_model_dir, texts, window_tokens=WINDOW)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for lang, text in texts.items():
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        nll, count = hf_nll(tiny_model_dir, token_windows(ids, [tokenizer.bos_token_id], WINDOW))
        assert result.tokens[lang] == count == len(ids), "every token scored once, BOS never"
        assert result.nll[lang] == pytest.approx(nll, rel=TOLERANCE)
        assert result.perplexity[lang] == pytest.approx(math.exp(nll / count), rel=TOLERANCE)
    assert result.window_tokens == WINDOW and result.checkpoint == "tiny"
    capped = measure_perplexity(
        server.endpoint, tiny_model_dir, {"en": texts["en"]},
        window_tokens=WINDOW, max_tokens=WINDOW - 1,
    )  # fmt: skip
    assert capped.tokens == {"en": WINDOW - 1}

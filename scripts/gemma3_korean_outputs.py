"""Regenerate tests/data/gemma3_270m_korean_outputs.jsonl: greedy answers of the default model to 40 of
ko_rag's questions, the real Korean outputs tests/test_language_fidelity.py checks the fidelity signals on.

    nice -n 10 .venv/bin/python scripts/gemma3_korean_outputs.py [--model-dir DIR]

Closed-book (no documents): each prompt is ko_rag's closed-book instruction and the question, as the
suite sends it, and the model continues greedily for 48 new tokens with transformers on the CPU (bf16,
no stop string: the newline ko_rag stops at is kept in the output, so drift after it shows too). The
questions are the first ones of each kind in evals/tasks/ko_rag/questions.jsonl: 12 whose text holds
Latin letters (Debian, UAE), 12 factual, 8 numeric, 4 multi-part and 4 unanswerable ones. The first
line of the file is a header naming the model, its revision, the packages and the date. About two
minutes on two cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a file: the repository's packages

from evals.tasks.ko_rag.context import CLOSED_BOOK_INSTRUCTION, GEN_SUFFIX
from kqe.core.records import package_versions

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = REPO / "evals/tasks/ko_rag/questions.jsonl"
MODELS = REPO / "kqe/core/models.toml"
OUTPUT = REPO / "tests/data/gemma3_270m_korean_outputs.jsonl"
DEFAULT_MODEL = Path.home() / ".cache/kqe/models/gemma3-270m"
MAX_NEW_TOKENS = 48
PICKS = {"latin": 12, "factual": 12, "numeric": 8, "multi": 4, "unanswerable": 4}
_LATIN = re.compile("[A-Za-z]")


def pick_questions() -> list[dict[str, str]]:
    """The first questions of each kind in PICKS, in file order (a Latin-holding one counts as `latin`)."""
    taken: dict[str, int] = dict.fromkeys(PICKS, 0)
    picked = []
    for line in QUESTIONS.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        kind = "latin" if _LATIN.search(row["question"]) else row["type"]
        if taken[kind] < PICKS[kind]:
            taken[kind] += 1
            picked.append({"id": row["id"], "kind": kind, "question": row["question"]})
    return picked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=DEFAULT_MODEL)
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.bfloat16).eval()
    manifest = json.loads((args.model_dir / "kqe-model.json").read_text(encoding="utf-8"))
    header = {
        "header": True,
        "model": manifest["model"],
        "hub_id": manifest["hub_id"],
        "revision": tomllib.loads(MODELS.read_text(encoding="utf-8"))[manifest["model"]]["revision"],
        "weights": f"bf16 dequantized from {manifest['source']['gguf_file']} "
        f"(sha256 {manifest['source']['gguf_sha256'][:12]}), kqe.core.modelstore",
        "decoding": f"greedy, max_new_tokens {MAX_NEW_TOKENS}, transformers on CPU, one left-padded batch, "
        "no stop string",
        "prompt": "ko_rag closed-book: CLOSED_BOOK_INSTRUCTION + GEN_SUFFIX (evals/tasks/ko_rag/context.py)",
        "packages": package_versions(("torch", "transformers")),
        "date": datetime.date.today().isoformat(),
    }
    rows = pick_questions()
    prompts = [CLOSED_BOOK_INSTRUCTION + GEN_SUFFIX.format(question=row["question"]) for row in rows]
    tokenizer.padding_side = "left"  # one batch: every prompt ends where its answer starts
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    outputs = tokenizer.batch_decode(out[:, batch.input_ids.shape[1] :], skip_special_tokens=True)
    lines = [json.dumps(header, ensure_ascii=False)]
    for row, prompt, output in zip(rows, prompts, outputs, strict=True):
        lines.append(json.dumps(row | {"prompt": prompt, "output": output}, ensure_ascii=False))
    OUTPUT.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()

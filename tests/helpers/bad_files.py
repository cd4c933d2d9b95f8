"""Files a user may pass by mistake or receive from someone else: not UTF-8, binary, of the wrong kind,
truncated, with NaN, duplicated rows, links, folders where files belong, a FIFO, a file larger than kqe
reads, a task tree too deep, model folders kqe must refuse."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from evals.reporting.leaderboard import write_leaderboard
from evals.reporting.leaderboard_row import LEADERBOARD_SCHEMA_VERSION as NOW
from kqe.core.io import MAX_READ_BYTES
from tests.helpers.leaderboard_rows import rows


def write_cases(root: Path, tiny: Path) -> None:
    """Every bad file the bad-input tables name, under `root` (the `{d}` of their cases)."""
    good = root / "good.csv"
    write_leaderboard(good, rows())
    text = good.read_text(encoding="utf-8")
    header, first, *rest = text.splitlines()
    files: dict[str, str | bytes] = {
        "binary.csv": bytes(range(256)) * 4,
        "latin1.csv": text.replace("—", "-").replace("inconclusive", "inconclusivé").encode("latin-1"),
        "nul.csv": text[:200] + "\0" + text[200:],
        "empty.csv": "",
        "header-only.csv": header + "\n",
        "not-csv.csv": '{"a": 1}\n',
        "dup-row.csv": "\n".join([header, first, first, *rest]) + "\n",
        "nan-ci.csv": text.replace("-0.06,-0.04", "nan,nan", 1)
        if "-0.06,-0.04" in text
        else text.replace(",0.5,", ",nan,", 1),
        "inf-cell.csv": text.replace(",0.5,", ",inf,", 1),
        "word-in-number.csv": text.replace(",0.5,", ",half,", 1),
        "mixed-schema.csv": "\n".join(
            [header, first, *(line.replace(f"{NOW},", f"{NOW - 1},", 1) for line in rest)]
        )
        + "\n",
        "short-row.csv": "\n".join([header, first[: len(first) // 2], *rest]) + "\n",
        "long-row.csv": "\n".join([header, first + ",x,y", *rest]) + "\n",
        "other-model.csv": text + first.replace("gemma3-270m", "qwen2.5-7b", 1) + "\n",
        "bad.jsonl": b"\xff\xfe\x00binary",
        "not-items.jsonl": '{"task": "mmlu"}\n{"task": "mmlu"}\n',
        "nan-items.jsonl": '{"task": "mmlu", "item_id": "a", "correct": NaN}\n',
        "array.jsonl": "[1, 2, 3]\n[4]\n",
        "empty.jsonl": "",
        "binary.log": bytes(range(256)) * 64,
        "latin1.log": "CUDA out of memory. Tried to allocate 2.00 GiB é".encode("latin-1"),
        "recipes-binary.toml": b"\x00\x01\x02",
        "recipes-latin1.toml": '[mine]\nscheme = "awq-w4a16"\nnote = "é"\n'.encode("latin-1"),
        "recipes-wrong-type.toml": '[mine]\nscheme = "awq-w4a16"\ngroup_size = "big"\n',
        "recipes-not-table.toml": "mine = 3\n",
        "recipes-bad-syntax.toml": "[mine\nscheme=",
    }
    for name, data in files.items():
        path = root / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    (root / "a-folder.csv").mkdir()
    (root / "dangling.csv").symlink_to(root / "nowhere.csv")
    os.mkfifo(root / "a-fifo.csv")  # nobody writes to it: a reader that opens it waits forever
    with (root / "huge.csv").open("wb") as huge:  # sparse: one byte more than kqe reads
        huge.truncate(MAX_READ_BYTES + 1)
    deep = root / "deep-tasks" / "/".join("abcdefghij")
    deep.mkdir(parents=True)
    (deep / "task.yaml").write_text("task: deep\n", encoding="utf-8")
    model = root / "broken-config"
    shutil.copytree(tiny, model)
    (model / "config.json").write_text(
        '{"model_type": "llama", "num_hidden_layers": "many"', encoding="utf-8"
    )
    model = root / "config-not-object"
    shutil.copytree(tiny, model)
    (model / "config.json").write_text("[1, 2]", encoding="utf-8")
    model = root / "config-binary"
    shutil.copytree(tiny, model)
    (model / "config.json").write_bytes(b"\xff\xfe\x00")
    extra = root / "extra-broken-json"
    shutil.copytree(tiny, extra)
    (extra / "config.json").write_text("{not json", encoding="utf-8")
    rag = root / "rag-broken"
    rag.mkdir()
    (rag / "docs.jsonl").write_text("{not json\n", encoding="utf-8")
    (rag / "questions.jsonl").write_text("", encoding="utf-8")
    (root / "rag-missing").mkdir()


def write_refused_models(root: Path, tiny: Path) -> None:
    """Model folders that must be refused (pickled weights only, code shipped with the model, a
    truncated shard), a leaderboard of the wrong columns, and a folder that holds no model (nor task)."""
    (root / "pickled").mkdir(parents=True)
    shutil.copy(tiny / "config.json", root / "pickled" / "config.json")
    (root / "pickled" / "pytorch_model.bin").write_bytes(b"not loaded: unpickling runs code")
    shutil.copytree(tiny, root / "custom-code")
    config = json.loads((root / "custom-code" / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (root / "custom-code" / "config.json").write_text(json.dumps(config))
    shutil.copytree(tiny, root / "corrupt-shard")
    (root / "corrupt-shard" / "model.safetensors").write_bytes(b"\x00" * 16)
    (root / "leaderboard.csv").write_text("a,b\n1,2\n")
    (root / "not-a-model").mkdir()


def write_compare_pairs(root: Path) -> None:
    """A baseline per-item file and candidates `kqe compare` must refuse beside it."""
    (root / "base.jsonl").write_text('{"task": "mmlu", "item_id": "q1", "correct": false}\n')
    (root / "other-items.jsonl").write_text('{"task": "mmlu", "item_id": "other", "correct": true}\n')
    (root / "same-items.jsonl").write_text('{"task": "mmlu", "item_id": "q1", "correct": true}\n')
    (root / "csv-rows.jsonl").write_text("task,item_id,correct\nmmlu,q1,true\n")
    (root / "other-format.jsonl").write_text('{"hello": 1}\n{"hello": 2}\n')


RAG_ANSWERS = {
    "not-json": ('{"id": "q1", "answer": "x"',),
    "no-answer": ('{"id": "q1"}',),
    "not-object": ('["q1", "x"]',),
    "unknown-id": ('{"id": "q1", "answer": "x"}', '{"id": "q9", "answer": "x"}'),
    "repeated-id": ('{"id": "q1", "answer": "x"}', '{"id": "q1", "answer": "y"}'),
    "blank": ("",),
    "good": ('{"id": "q1", "answer": "x"}',),
}
"""Answer files for `kqe rag score`, each `rag-answers/<name>/answers.jsonl`, by what is wrong with it."""


def write_rag_answers(root: Path) -> None:
    """Each answer file of RAG_ANSWERS under `root`."""
    for name, lines in RAG_ANSWERS.items():
        path = root / name / "answers.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")

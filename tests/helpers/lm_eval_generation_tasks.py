"""lm-eval `generate_until` task folders a user could write, over local `json` files.

- `kqe_gen_medmcqa_local` includes lm-eval's own KorMedMCQA template (its prompt, its
  `utils.ExtractChoiceFilter` answer cascade + take_first, exact_match with ignore_case and
  ignore_punctuation), pointed at KorMedMCQA-shaped rows written here (question, A..E, answer 1-5),
  0-shot and with a short max_gen_toks so the tiny model's answers stay short.
- `kqe_gen_short_local` is a free-form Korean answer task with two filter pipelines (the raw text, and a
  regex that takes the first Hangul word) and exact_match plus chrF (a corpus metric, scored per item).
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.lm_eval_tasks import EVENTS, SUBJECTS


def medmcqa_rows() -> list[dict[str, object]]:
    """KorMedMCQA-shaped rows: a question, five options A..E, the answer as 1..5."""
    rows = []
    for index, (cause, effect, other) in enumerate(EVENTS * 3):
        options = [effect, other, cause, "모르겠다.", "알 수 없다."]
        rotate = index % 5
        options = options[rotate:] + options[:rotate]
        row: dict[str, object] = {"question": f"{cause} 그 다음에 무슨 일이 있었나?"}
        row |= dict(zip("ABCDE", options, strict=True))
        row |= {"answer": options.index(effect) + 1, "subject": SUBJECTS[index % len(SUBJECTS)]}
        rows.append(row)
    return rows


def short_rows() -> list[dict[str, object]]:
    """Free-form rows: a sentence and the one word that answers what follows."""
    return [
        {"question": f"{cause} 다음 문장은?", "answer": effect, "subject": SUBJECTS[index % len(SUBJECTS)]}
        for index, (cause, effect, _) in enumerate(EVENTS * 2)
    ]


def write_generation_tasks(folder: Path, max_gen_toks: int = 12) -> Path:
    """A folder of the two generation YAMLs and their json files; returns it."""
    import lm_eval

    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("medmcqa.json", medmcqa_rows()), ("short.json", short_rows())):
        (folder / name).write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", "utf-8")
    template = Path(lm_eval.__file__).parent / "tasks" / "kormedmcqa" / "_template_yaml"
    (folder / "kqe_gen_medmcqa_local.yaml").write_text(
        f"include: {template}\ntask: kqe_gen_medmcqa_local\ndataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'medmcqa.json'}\n"
        "fewshot_split: null\nnum_fewshot: 0\n"
        "generation_kwargs:\n  until: ['Q:', '</s>', '.', \"\\n\\n\"]\n  do_sample: false\n"
        f"  temperature: 0.0\n  max_gen_toks: {max_gen_toks}\n"
        "metadata:\n  version: 1.0\n  kqe_subject_field: subject\n",
        encoding="utf-8",
    )
    (folder / "kqe_gen_short_local.yaml").write_text(
        f"task: kqe_gen_short_local\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'short.json'}\ntest_split: test\noutput_type: generate_until\n"
        'doc_to_text: "질문: {{question}}\\n답:"\ndoc_to_target: answer\n'
        "filter_list:\n"
        "  - name: raw\n    filter:\n      - function: take_first\n"
        "  - name: first-word\n    filter:\n"
        "      - function: regex\n        regex_pattern: '([가-힣]+)'\n      - function: take_first\n"
        "metric_list:\n  - metric: exact_match\n    aggregation: mean\n    higher_is_better: true\n"
        "  - metric: chrf\n    aggregation: chrf\n    higher_is_better: true\n"
        f'generation_kwargs:\n  until: ["\\n"]\n  do_sample: false\n  max_gen_toks: {max_gen_toks}\n'
        "metadata:\n  version: 1.0\n  kqe_subject_field: subject\n",
        encoding="utf-8",
    )
    return folder

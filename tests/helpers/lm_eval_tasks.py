"""lm-eval task folders a user could write: YAMLs over local `json` datasets, shared by the bridge tests.

`kqe_copa_local` includes lm-eval's own `kobest_copa.yaml` (its doc_to_text / doc_to_choice /
doc_to_target functions) and only points it at a local file of KoBEST-COPA-shaped rows (the fields of
skt/kobest_v1 `copa`: premise, question 원인/결과, alternative_1, alternative_2, label), so stock
`lm_eval` and the suite read the same data. `kqe_letters_local` is a 4-way letter task (" A".." D").
The sentences are written here, not taken from KoBEST.
"""

from __future__ import annotations

import json
from pathlib import Path

SUBJECTS = ("날씨", "생활", "학교")
EVENTS = (
    ("비가 많이 왔다.", "길이 젖었다.", "하늘이 맑았다."),
    ("아이가 넘어졌다.", "무릎이 아팠다.", "노래를 불렀다."),
    ("시험이 끝났다.", "학생들이 쉬었다.", "책이 비쌌다."),
    ("물이 끓었다.", "차를 만들었다.", "눈이 내렸다."),
    ("전기가 나갔다.", "방이 어두워졌다.", "밥이 맛있었다."),
    ("버스를 놓쳤다.", "회사에 늦었다.", "꽃이 피었다."),
    ("바람이 세게 불었다.", "창문이 흔들렸다.", "우유를 샀다."),
    ("약을 먹었다.", "열이 내렸다.", "영화가 길었다."),
)


def copa_rows() -> list[dict[str, object]]:
    """KoBEST-COPA-shaped rows: the effect asked (결과) or the cause asked (원인), answers on both sides."""
    rows = []
    for index, (cause, effect, other) in enumerate(EVENTS * 3):
        asks_effect = index % 2 == 0
        right, premise = (effect, cause) if asks_effect else (cause, effect)
        first = index % 3 != 0
        rows.append(
            {
                "premise": premise,
                "question": "결과" if asks_effect else "원인",
                "alternative_1": right if first else other,
                "alternative_2": other if first else right,
                "label": 0 if first else 1,
                "subject": SUBJECTS[index % len(SUBJECTS)],
            }
        )
    return rows


def letter_rows() -> list[dict[str, object]]:
    """4-way letter-choice rows over the same sentences."""
    rows = []
    for index, (cause, effect, other) in enumerate(EVENTS * 3):
        choices = [effect, other, cause, "모르겠다."]
        rotate = index % 4
        choices = choices[rotate:] + choices[:rotate]
        question = f"{cause} 그래서 어떻게 되었나?"
        rows.append({"question": question, "choices": choices, "answer": choices.index(effect)})
    return rows


def write_user_tasks(folder: Path) -> Path:
    """A folder of two user YAMLs and their json files; returns it."""
    import lm_eval

    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("copa.json", copa_rows()), ("letters.json", letter_rows())):
        (folder / name).write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", "utf-8")
    stock = Path(lm_eval.__file__).parent / "tasks" / "kobest" / "kobest_copa.yaml"
    (folder / "kqe_copa_local.yaml").write_text(
        f"include: {stock}\ntask: kqe_copa_local\ndataset_path: json\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {folder / 'copa.json'}\n"
        "training_split: null\nvalidation_split: null\ntest_split: test\n"
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\n"
        f"metadata:\n  version: 1.0\n  kqe_subject_field: subject\n",
        encoding="utf-8",
    )
    (folder / "kqe_letters_local.yaml").write_text(
        f"task: kqe_letters_local\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {folder / 'letters.json'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{question}}\\nA. {{choices[0]}}\\nB. {{choices[1]}}\\nC. {{choices[2]}}\\n'
        'D. {{choices[3]}}\\n정답："\n'
        'doc_to_choice: ["A", "B", "C", "D"]\ndoc_to_target: answer\n'
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\nmetadata:\n  version: 1.0\n",
        encoding="utf-8",
    )
    return folder

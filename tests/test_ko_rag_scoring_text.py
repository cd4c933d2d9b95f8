"""ko_rag scoring on ordinary text (issue 51): answers that glue a digit to Latin letters ("3D", "5GHz"),
Latin words with digits, escape sequences and control characters score without raising and score
right; files that are not UTF-8 are one-line errors through `kqe rag score`; a UTF-8 BOM is fine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evals.tasks.ko_rag.abstention import abstains
from evals.tasks.ko_rag.answer_score import score_answer, totals
from evals.tasks.ko_rag.choices import answer_kind
from evals.tasks.ko_rag.normalise import normalise
from tests.helpers.cli import assert_one_line_error, run_kqe

DATA = Path(__file__).resolve().parent / "data" / "ko_rag"

RIGHT = [
    # a digit glued to Latin letters: the number is the exact span, the letters ordinary tokens
    ("5GHz입니다", "5GHz"),
    ("5 GHz입니다.", "5GHz"),
    ("3D 프린터입니다.", "3D 프린터"),
    ("3D프린터", "3D 프린터"),
    ("3kg입니다.", "3kg"),
    ("12PM", "12PM"),
    ("1080p입니다", "1080p"),
    ("4K UHD", "4K UHD"),
    ("100Mbps", "100Mbps"),
    ("2.4GHz와 5GHz", "5GHz, 2.4GHz"),
    ("제5GHz", "5GHz"),
    # Latin letters then digits: one exact word, as before
    ("ext4입니다.", "ext4"),
    ("i386 아키텍처입니다", "i386 아키텍처"),
    ("H100 GPU", "H100 GPU"),
    ("IPv6", "ipv6"),
    ("USB-C 3.2 Gen2x2 (20Gbps)", "USB-C 3.2 Gen2x2 (20Gbps)"),
    # escape sequences and control characters (never NUL) around the answer
    ("5년입니다.\n", "5년"),
    ("\t5년\t", "5년"),
    ("5년\r\n", "5년"),
    ("5년\\n", "5년"),  # a literal backslash-n: the answer JSON-escaped twice
    ("\\n\\t5년입니다", "5년"),
    ("5년입니다\\\\", "5년"),
    ("\x1b[31m3D\x1b[0m 프린터", "3D 프린터"),  # a terminal colour code
    ("\x07\x0b5년\x0c", "5년"),
    ("C:\\Windows\\System32", "C:\\Windows\\System32"),
    # mixed Hangul, Latin, digits and punctuation
    ("2024년 3월 5일입니다.", "2024. 3. 5."),
    ("대통령의 임기는 5년이다", "5년"),  # partial credit: the number is there
    ("qspanab 5년", "5년"),  # the scorer's own placeholder word, written by the answer
    (", ".join(str(n) for n in range(40)), ", ".join(str(n) for n in range(39, -1, -1))),  # > 16 spans
]


@pytest.mark.parametrize(("answer", "gold"), RIGHT)
def test_ordinary_answers_score_and_get_the_numbers_credit(answer: str, gold: str) -> None:
    score = score_answer(answer, [gold], answerable=True)
    assert 0 < score.f1 <= 1 and 0 < score.char_f1 <= 1  # the gold's exact spans were all found
    assert set(normalise(gold).exact) <= set(normalise(answer.strip()).exact)
    answer_kind(answer)  # the multiple-choice builder reads the same spans


@pytest.mark.parametrize(
    ("answer", "gold"),
    [
        ("5GHz입니다", "5GHz"),
        ("5 GHz", "5GHz"),
        ("3D 프린터입니다.", "3D 프린터"),
        ("3kg입니다.", "3kg"),
        ("1080p입니다", "1080p"),
        ("2.4GHz와 5GHz", "5GHz, 2.4GHz"),
        ("ext4입니다.", "ext4"),
        ("5년\\n", "5년"),
        ("\x1b[31m3D\x1b[0m 프린터", "3D 프린터"),
        ("\x07\x0b5년\x0c", "5년"),
    ],
)
def test_the_same_answer_in_other_dress_is_exact(answer: str, gold: str) -> None:
    score = score_answer(answer, [gold], answerable=True)
    assert (score.exact, score.f1, score.char_f1) == (True, 1.0, 1.0)


@pytest.mark.parametrize(
    ("answer", "gold"),
    [("2.4GHz", "5GHz"), ("4kg", "3kg"), ("2D 프린터", "3D 프린터"), ("\\n4년", "5년"), ("11PM", "12PM")],
)
def test_a_wrong_number_next_to_latin_letters_still_scores_zero(answer: str, gold: str) -> None:
    score = score_answer(answer, [gold], answerable=True)
    assert (score.exact, score.f1, score.char_f1) == (False, 0.0, 0.0)


PIECES = [
    "3", "5", "12", "2.4", "2010", "1,000", "0", " ", "  ", "\n", "\t", "\r\n", "\\n", "\\t", "\\\\",
    "\\", "\x1b[0m", "\x07", ".", ",", "-", "--", "/", ":", "(", ")", "%", '"', "년", "월", "일", "개월",
    "제", "조", "분의", "삼", "두", "번", "퍼센트", "GHz", "kg", "D", "PM", "p", "kb", "Mbps", "ext",
    "i", "x", "qspan", "qspanab", "국민", "프린터", "입니다", "및", "와", "답할 수 없음", "①", "½", "Ⅻ",
]  # fmt: skip
TEXT = st.lists(
    st.one_of(
        st.sampled_from(PIECES),
        st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=4),
    ),
    max_size=20,
).map("".join)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(TEXT, st.lists(TEXT, min_size=1, max_size=3), st.booleans())
@example("3D 프린터", ["3D 프린터"], True)
@example("qspanapqspanb 5GHz 12PM\\n", ["12PM"], True)
def test_the_scorer_never_raises_and_stays_within_0_and_1(
    answer: str, golds: list[str], answerable: bool
) -> None:
    score = score_answer(answer, golds, answerable)
    assert 0.0 <= score.f1 <= 1.0 and 0.0 <= score.char_f1 <= 1.0
    assert score.hangul_share is None or 0.0 <= score.hangul_share <= 1.0
    total = totals([(score, answerable), (score_answer(golds[0], golds, True), True)])
    shares = (total.em, total.f1, total.char_f1, total.abstain_precision, total.abstain_recall)
    assert all(share is None or 0.0 <= share <= 1.0 for share in shares)
    gold = golds[0].strip()
    if normalise(gold).items and not abstains(gold):  # a gold with tokens is its own exact match
        assert score_answer(gold, [gold], True).exact
    answer_kind(answer)


def _write(path: Path, rows: list[dict[str, str]], encoding: str, bom: bytes = b"") -> Path:
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    path.write_bytes(bom + text.encode(encoding))
    return path


ANSWERS = [{"id": "q2", "answer": "5년입니다"}, {"id": "q1", "answer": "대한민국은 민주공화국이다"}]


@pytest.mark.parametrize(
    ("encoding", "needle"),
    [("cp949", "answers.jsonl:1: not UTF-8"), ("utf-16", "answers.jsonl is UTF-16"),
     ("utf-16-le", "answers.jsonl:1: holds NUL bytes"), ("utf-16-be", "answers.jsonl:1: holds NUL bytes")],
)  # fmt: skip
def test_an_answers_file_not_in_utf8_is_one_line(encoding: str, needle: str, tmp_path: Path) -> None:
    path = _write(tmp_path / "answers.jsonl", ANSWERS, encoding)
    result = run_kqe("rag", "score", str(path), "--rag-data", str(DATA), cwd=tmp_path, home=tmp_path / "h")
    assert_one_line_error(result, str(path), needle, "must be UTF-8")


def test_a_binary_answers_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"
    path.write_bytes(b'{"id": "q1", "answer": "x"}\n' + bytes(range(255, 0, -1)))
    result = run_kqe("rag", "score", str(path), "--rag-data", str(DATA), cwd=tmp_path, home=tmp_path / "h")
    assert_one_line_error(result, f"{path}:2: not UTF-8 (byte 0xff", "must be UTF-8")


@pytest.mark.parametrize("name", ["docs.jsonl", "questions.jsonl"])
def test_rag_data_not_in_utf8_is_one_line(name: str, tmp_path: Path) -> None:
    data = tmp_path / "rag"
    data.mkdir()
    for file in ("docs.jsonl", "questions.jsonl"):
        rows = [json.loads(line) for line in (DATA / file).read_text(encoding="utf-8").splitlines() if line]
        _write(data / file, rows, "cp949" if file == name else "utf-8")
    answers = _write(tmp_path / "answers.jsonl", ANSWERS, "utf-8")
    result = run_kqe("rag", "score", str(answers), "--rag-data", str(data), cwd=tmp_path, home=tmp_path / "h")
    assert_one_line_error(result, f"{data / name}:1: not UTF-8", "must be UTF-8")


def test_a_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path / "answers.jsonl", ANSWERS, "utf-8", bom=b"\xef\xbb\xbf")
    result = run_kqe(
        "rag", "score", str(path), "--json", "--rag-data", str(DATA), cwd=tmp_path, home=tmp_path / "h"
    )
    assert result.returncode == 0, result.stderr
    assert [item["id"] for item in json.loads(result.stdout)["items"]] == ["q2", "q1"]

"""Which checkpoints a run builds: schemes × calibration mixes, and each one's calibration control."""

from __future__ import annotations

import pytest

from kqe.core.errors import UserError
from kqe.core.eval_config import split_mixes
from kqe.pipeline.matrix import MatrixEntry, calibration_references, mix_label, plan_matrix

NEEDS_CALIBRATION = {"awq-w4a16", "gptq-w4a16"}.__contains__


def test_split_mixes_keeps_the_parts_of_a_custom_mix_together() -> None:
    assert split_mixes("ko70,en100") == ("ko70", "en100")
    assert split_mixes("ko70,ko=0.6,en=0.4,en100") == ("ko70", "ko=0.6,en=0.4", "en100")
    assert split_mixes("ko=0.6,en=0.4,ko=0.5,en=0.5") == ("ko=0.6,en=0.4", "ko=0.5,en=0.5")
    with pytest.raises(UserError, match="names no mix"):
        split_mixes(" , ")


def test_mix_label_names_a_custom_mix_by_its_shares() -> None:
    assert mix_label("ko70") == "ko70"
    assert mix_label("ko=0.6,en=0.4") == "ko60en40"
    assert mix_label("en=1") == "en100"


def test_every_calibrated_scheme_gets_one_checkpoint_per_mix_base_first() -> None:
    entries = plan_matrix(("awq-w4a16", "fp8-dynamic", "bf16"), ("ko70", "en100"), NEEDS_CALIBRATION)
    assert entries == [
        MatrixEntry("bf16", "bf16", None),
        MatrixEntry("awq-w4a16-ko70", "awq-w4a16", "ko70"),
        MatrixEntry("awq-w4a16-en100", "awq-w4a16", "en100"),
        MatrixEntry("fp8-dynamic", "fp8-dynamic", None),
    ]


def test_the_same_mix_or_scheme_twice_is_an_error() -> None:
    with pytest.raises(UserError, match="same mix twice"):
        plan_matrix(("awq-w4a16",), ("en100", "en=1.0"), NEEDS_CALIBRATION)
    with pytest.raises(UserError, match="checkpoint twice"):
        plan_matrix(("fp8-dynamic", "fp8-dynamic"), ("ko70",), NEEDS_CALIBRATION)


@pytest.mark.parametrize(
    "mixes",
    [
        ("ko70", "ko=0.7,en=0.3"),  # a named mix and its shares were built twice, compared with itself
        ("ko70", "en=0.3,ko=0.7"),
        ("ko=0.6,en=0.4", "en=0.4,ko=0.6"),
        ("ko100", "ko=1,en=0"),
        ("en100", "en=1.0"),
    ],
)
def test_one_mix_under_two_spellings_is_refused(mixes: tuple[str, str]) -> None:
    assert mix_label(mixes[0]) == mix_label(mixes[1])
    with pytest.raises(UserError, match="same mix twice"):
        plan_matrix(("awq-w4a16",), mixes, NEEDS_CALIBRATION)


def test_each_mix_is_paired_with_the_least_korean_mix_of_its_scheme() -> None:
    mixes = ("ko100", "ko70", "en100")
    entries = plan_matrix(("awq-w4a16", "gptq-w4a16", "fp8-dynamic"), mixes, NEEDS_CALIBRATION)
    references = calibration_references(entries, {"ko100": 1.0, "ko70": 0.7, "en100": 0.0})
    assert references == {
        "awq-w4a16-ko100": "awq-w4a16-en100",
        "awq-w4a16-ko70": "awq-w4a16-en100",
        "gptq-w4a16-ko100": "gptq-w4a16-en100",
        "gptq-w4a16-ko70": "gptq-w4a16-en100",
    }
    one_mix = plan_matrix(("awq-w4a16",), ("ko70",), NEEDS_CALIBRATION)
    assert calibration_references(one_mix, {"ko70": 0.7}) == {}

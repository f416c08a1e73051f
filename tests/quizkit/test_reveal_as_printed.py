"""Reveals judge what the lesson shows: a size typed as the lesson prints it (two decimals of its
unit) is right; "5 GB" for 5 GiB is named as the decimal-units slip; re-running a reveal after
later cells moved the device on gives the first verdict; Enter in the predict box saves."""
from __future__ import annotations

import pytest

from gpumemlab.quizkit.predict import Predictions, Spec, compare
from gpumemlab.units import GiB, KiB, MiB, format_size, parse_size

SIZE = Spec("07.p1", "peak?", "size")


@pytest.fixture
def predict(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMEMLAB_HEADLESS", "1")
    return Predictions(tmp_path / "progress.json")


@pytest.mark.parametrize("actual", [29527654, 220527001, 3 * GiB + 123 * MiB + 7, 1536 * KiB + 1])
def test_the_value_as_printed_is_right(actual):
    printed = format_size(actual)
    got = compare(SIZE, parse_size(printed) if "." not in printed else
                  round(float(printed.split()[0]) * parse_size("1 " + printed.split()[1])), actual)
    assert got.verdict in ("exact", "within"), got.text
    assert "precision the lesson prints" in got.text or got.verdict == "exact"


def test_a_value_one_step_off_at_that_precision_is_still_off():
    actual = 29527654                      # 28.16 MiB
    got = compare(SIZE, round(28.17 * MiB), actual)
    assert got.verdict == "off", got.text


@pytest.mark.parametrize("typed,actual", [("5 GB", 5 * GiB), ("512 MB", 512 * MiB),
                                          ("3.12 GB", round(3.12 * GiB))])
def test_gb_for_gib_is_a_named_misconception(predict, typed, actual):
    predict("99.p1", "free in total?")
    predict.answer("99.p1", typed)
    got = predict.judge("99.p1", actual)
    assert got.verdict == "off"
    assert "not GiB" in got.rule or "not MiB" in got.rule, got.text
    assert got.rule in got.text


def test_a_gib_guess_that_is_merely_wrong_names_no_unit_slip(predict):
    predict("99.p1", "free in total?")
    predict.answer("99.p1", "4 GiB")
    assert predict.judge("99.p1", 5 * GiB).rule == ""


def test_rerunning_a_reveal_judges_the_first_measurement(predict):
    predict("99.p1", "free in total?")
    first = predict.judge("99.p1", 5 * GiB)          # Run All: no prediction yet
    assert first.verdict == "none"
    predict.answer("99.p1", "5 GiB")                   # the learner predicts, then re-runs ...
    again = predict.judge("99.p1", 4 * GiB)            # ... on the state later cells left
    assert again.verdict == "exact" and again.actual == 5 * GiB, again.text
    predict.reset("99")                                # a reset forgets the measurement too
    assert predict.judge("99.p1", 4 * GiB).actual == 4 * GiB


def test_enter_in_the_box_saves(predict):
    pytest.importorskip("ipywidgets")
    from gpumemlab.quizkit.predict_view import PredictView

    view = PredictView(predict, predict._declare("04.p1", "reserved?", None, None, ""))
    view.field.value = "4 MiB"                         # what Enter does (continuous_update off)
    assert predict.progress().prediction("04.p1")["value"] == 4 * MiB
    assert "Saved" in view.feedback.value
    choice = PredictView(predict, predict._declare("02.p2", "succeeds?", None, ["yes", "no"], ""))
    choice.field.value = "no"
    assert predict.progress().prediction("02.p2")["value"] == "no"


@pytest.mark.parametrize("typed,actual,ending", [("32", 32 * MiB, "would be right."),
                                                 ("30", 32 * MiB, "would be 6.2 % off."),
                                                 ("3", 3 * GiB + 123 * MiB, "% off.")])
def test_a_bare_number_read_as_bytes_is_named_in_the_shown_unit(predict, typed, actual, ending):
    # "32" for a 32.00 MiB answer is 32 bytes (a bare number is a byte count, as gpu.empty reads
    # it); the reveal says so and names the size the learner meant (before: "a factor of 1048576")
    predict("99.p1", "reserved?")
    predict.answer("99.p1", typed)
    got = predict.judge("99.p1", actual)
    unit = format_size(actual).split()[-1]
    assert got.verdict == "off"
    assert f"read as bytes; did you mean {typed} {unit}?" in got.rule and ending in got.rule
    assert got.rule in got.text


def test_a_bare_number_far_from_the_answer_in_any_unit_names_no_slip(predict):
    predict("99.p1", "reserved?")
    predict.answer("99.p1", "5")
    assert predict.judge("99.p1", 32 * MiB).rule == ""          # 5 MiB is not near 32 MiB
    predict("99.p2", "requested?")
    predict.answer("99.p2", "32")
    assert predict.judge("99.p2", 900).rule == ""               # shown in bytes: no other unit

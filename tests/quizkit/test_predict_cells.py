"""Predict cells: parsing (sizes with units, numbers, choices), one-line errors, the reveal's
verdicts, progress storage across instances, headless printing, the widget view and its static
fallback."""
from __future__ import annotations

import json

import pytest

from gpumemlab.quizkit.predict import Predictions, Spec, compare, parse_prediction
from gpumemlab.quizkit.predict_rules import Misconception
from gpumemlab.units import GiB, MiB


@pytest.fixture
def predict(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMEMLAB_HEADLESS", "1")
    return Predictions(tmp_path / "progress.json")


SIZE = Spec("01.p1", "reserved?", "size")


@pytest.mark.parametrize("text,want", [("2 GiB", 2 * GiB), ("2048 MiB", 2 * GiB), ("512", 512),
                                        (" 20MiB ", 20 * MiB), ("1.5 MiB", 3 * MiB // 2),
                                        ("1.9 MiB", round(1.9 * MiB)), (4096, 4096)])
def test_sizes_accept_units(text, want):
    assert parse_prediction(SIZE, text) == want


def test_bad_predictions_get_one_line_and_keep_the_old_one(predict, capsys):
    predict("01.p1", "reserved?")
    predict.answer("01.p1", "2 MiB")
    capsys.readouterr()
    for bad in ("two", "5 parsecs", "", True, None, [1]):
        predict.answer("01.p1", bad)
        out = capsys.readouterr().out
        assert out.startswith("? 01.p1 asks for a size") and out.count("\n") == 1, out
    assert predict.progress().prediction("01.p1")["value"] == 2 * MiB
    predict("02.p1", "segments?", kind="number", unit="segments")
    capsys.readouterr()
    predict.answer("02.p1", "three")
    assert capsys.readouterr().out == ("? 02.p1 asks for a number of segments (digits, no size "
                                      "unit); got 'three'\n")
    predict("05.p1", "which?", choices=["defaults", "max_split_size_mb:512"])
    capsys.readouterr()
    predict.answer("05.p1", "c")
    assert "expected one of a) defaults, b) max_split_size_mb:512" in capsys.readouterr().out


def test_reveal_says_right_or_wrong_and_by_how_much(predict):
    predict("01.p1", "reserved?")
    assert predict.judge("01.p1", 2 * MiB).verdict == "none"
    predict.record("01.p1", "2 MiB")
    assert predict.judge("01.p1", 2 * MiB).verdict == "exact"
    predict.record("01.p1", "2.1 MiB")          # 5 % over an exact quantity: wrong, not "close"
    r = predict.judge("01.p1", 2 * MiB)
    assert r.verdict == "off" and "off by 102.40 KiB (too high, 5.00 %)" in r.text
    predict.record("01.p1", "20 MiB")
    r = predict.judge("01.p1", 2 * MiB)
    assert r.verdict == "off" and "a factor of 10.00" in r.text
    assert r.text.startswith("01.p1: you predicted 20.00 MiB; the simulator gives 2.00 MiB")
    predict("05.p1", "which?", choices=["defaults", "max_split_size_mb:512"])
    predict.record("05.p1", "a")
    assert predict.judge("05.p1", "defaults").verdict == "right"
    predict.revealed.clear()   # a kernel keeps its first measurement (test_reveal_as_printed)
    assert predict.judge("05.p1", "max_split_size_mb:512").verdict == "wrong"
    assert compare(Spec("x.1", "", "number"), 3, 0).text.endswith("off by 3 (too high).")


def test_a_misconception_names_its_rule_and_only_measured_answers_have_a_tolerance():
    slip = Misconception(lambda a: a - 2 * MiB, "the 1-byte tensor's small-pool segment")
    spec = Spec("01.p2", "reserved?", "size", misconceptions=(slip,))
    r = compare(spec, 122 * MiB, 124 * MiB)      # 1.6 % under: wrong, and why
    assert r.verdict == "off" and r.rule == slip.rule and r.text.endswith(slip.rule)
    assert compare(spec, 100 * MiB, 124 * MiB).rule == ""
    ratio = Spec("07.p2", "how many times?", "number", unit="times", tolerance=0.01,
                 tolerance_why="shown to 2 decimals")
    assert compare(ratio, 3.56, 3.57).verdict == "within"
    assert compare(ratio, 3.5, 3.57).verdict == "off"
    choice = Spec("02.p2", "?", "choice", ("yes", "no"),
                  misconceptions=(Misconception("yes", "one block serves a request"),))
    assert compare(choice, "yes", "no").text.endswith("one block serves a request")


def test_the_lessons_questions_keep_their_unit_after_a_kernel_restart(tmp_path, capsys):
    import gpumemlab.lessons  # noqa: F401  (registers the lessons' questions)
    fresh = Predictions(tmp_path / "p.json")    # a new kernel: no predict cell has run
    fresh.answer("01.p2", "124 MiB")
    assert capsys.readouterr().out.startswith("Saved: you predict 124.00 MiB")
    assert fresh.judge("01.p2", 124 * MiB).text.endswith("124.00 MiB: exactly right.")
    again = Predictions(tmp_path / "p.json")
    fresh.answer("01.p1", "124 MiB")            # a size for a count: one line, in any state
    again.answer("01.p1", "12 cudaMalloc calls")
    again.answer("02.p2", "7")
    again.answer("77.p1", "3")
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("? 01.p1 asks for a number of cudaMalloc calls (digits, no size unit); "
                      "got '124 MiB'")
    assert out[1].startswith("Saved: you predict 12 cudaMalloc calls")
    assert out[2].startswith("? expected one of a) yes, from the cache")
    assert out[3].startswith("? no question '77.p1' was asked") and len(out) == 4


def test_predictions_are_kept_in_the_progress_file(predict, tmp_path):
    predict("03.p9", "largest free block?")
    predict.record("03.p9", "36 MiB")
    again = Predictions(tmp_path / "progress.json")       # a new kernel: nothing declared
    r = again.judge("03.p9", 36 * MiB)
    assert r.verdict == "exact" and "36.00 MiB" in r.text
    data = json.loads((tmp_path / "progress.json").read_text())
    entry = data["predictions"]["03.p9"]
    assert entry["value"] == 36 * MiB and entry["text"] == "36 MiB" and entry["verdict"] == "exact"
    predict.reset("03")
    assert predict.progress().prediction("03.p9") is None


def test_headless_prints_the_question_and_moves_on(predict, capsys):
    assert predict("01.p2", "How many cudaMalloc calls?", kind="number") is None
    out = capsys.readouterr().out
    assert out.startswith("Predict 01.p2: How many cudaMalloc calls?")
    assert "gml.predict.answer('01.p2', '<number>')" in out


def test_widget_view_records_through_the_same_model(predict, monkeypatch):
    pytest.importorskip("ipywidgets")
    from gpumemlab.quizkit.predict_view import PredictView

    view = PredictView(predict, predict._declare("04.p1", "reserved after empty_cache?", None,
                                                 None, ""))
    assert view.submit("lots").startswith("? 04.p1 asks for a size")
    assert view.submit("4 MiB").startswith("Saved: you predict 4.00 MiB")
    bundle = view._repr_mimebundle_()
    assert bundle["text/plain"] == "Predict 04.p1: reserved after empty_cache?"
    assert "reserved after empty_cache?" in bundle["text/html"]
    assert "Your prediction: 4.00 MiB" in bundle["text/html"]
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == view.widget.model_id


def test_every_lesson_question_is_registered_as_the_lesson_asks_it():
    import ast
    from pathlib import Path

    import gpumemlab.lessons  # noqa: F401  (registers the lessons' questions)
    from gpumemlab.quizkit.predict_rules import QUESTIONS

    asked = {}
    for source in sorted((Path(__file__).parents[2] / "notebooks" / "src").glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "gml.predict":
                pid = node.args[0].value
                kw = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
                choices = tuple(kw.get("choices", ()))
                asked[pid] = (kw.get("kind") or ("choice" if choices else "size"),
                              kw.get("unit", ""), choices)
    assert len(asked) >= 20
    registered = {pid: (q.kind, q.unit, q.choices) for pid, q in QUESTIONS.items()}
    assert registered == asked


def test_the_answer_format_shown_is_never_a_possible_answer(tmp_path):
    """The predict cell shows how to answer in code with a placeholder, not an example value: an
    example such as 'a', 3 or '2 GiB' was the right answer of some questions (05.p1, 09.p2).
    For every question of every lesson, the placeholder shown does not parse as an answer, and
    the format line names no choice and no number."""
    import re

    import gpumemlab.lessons  # noqa: F401  (registers the lessons' questions)
    from gpumemlab.quizkit.predict import (PredictionError, Predictions, answer_example,
                                           answer_format, parse_prediction)
    from gpumemlab.quizkit.predict_rules import QUESTIONS

    assert len(QUESTIONS) >= 20
    shown = Predictions(progress_path=tmp_path / "progress.json")
    for pid, spec in QUESTIONS.items():
        example = answer_example(spec)
        with pytest.raises(PredictionError):
            parse_prediction(spec, example)
        fmt_line = answer_format(spec)
        assert not re.search(r"\d", example + fmt_line), (pid, fmt_line)
        assert not any(str(c).lower() in fmt_line.lower() for c in spec.choices), (pid, fmt_line)
        assert f"gml.predict.answer({pid!r}, {example!r})" in shown.text(pid)


def test_a_misconception_typed_as_printed_names_its_rule():
    """17.p1's likeliest wrong answer is the request itself, typed as the lesson prints it
    ("20.4 GiB", a byte off the request's exact count): the reveal names the rounding."""
    import gpumemlab.lessons  # noqa: F401
    from gpumemlab.lessons.memory_beyond_the_gpu import REQUEST_17
    from gpumemlab.quizkit.predict import parse_prediction
    from gpumemlab.quizkit.predict_rules import QUESTIONS

    spec = QUESTIONS["17.p1"]
    typed = parse_prediction(spec, "20.4 GiB")
    assert typed != REQUEST_17
    r = compare(spec, typed, 32 * GiB)
    assert r.verdict == "off" and "power of two" in r.rule and "36.25 %" in r.text
    assert not compare(spec, 20 * GiB, 32 * GiB).rule

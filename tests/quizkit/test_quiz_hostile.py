"""Hostile answers, banks and progress files against the quiz and exercise judges: each is a
failed verdict or one line of error (AnswerError, BankError, a note), never a traceback."""
import json

import pytest

import gpumemlab.lessons  # noqa: F401  (registers every lesson's exercise: L sees them all)
from gpumemlab.quizkit import lesson_exercises as L
from gpumemlab.quizkit.bank import BankError, all_banks, load_bank_file
from gpumemlab.quizkit.checker import AnswerError, evaluate
from gpumemlab.quizkit.progress import Progress

ATTACK_10 = "out" + ".clone()" * 200_000 + ".argmax(1).tolist()"


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = {"huge int": 10**400, "huge negative": -10**400, "huge in a list": [10**400],
           "huge in a dict": {"a": 10**400}, "huge size text": "9" * 400 + " MiB",
           "deep": nested(3000)}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_lesson_judges_fail_hostile_answers_in_one_line(name):
    for ex in L.all_exercises():
        verdict = L.judge(ex.id, HOSTILE[name])
        assert verdict.passed is False
        assert "\n" not in verdict.message and len(verdict.message) < 1200, (ex.id, name)


def test_the_10ex_answer_has_a_bounded_shape():
    verdict = L.judge("10.ex", ATTACK_10)   # took 114 s and 1.7 GB, and passed
    assert not verdict.passed and "characters" in verdict.message
    many = "out" + ".clone()" * 9 + ".argmax(1).tolist()"   # short, but too many calls
    verdict = L.judge("10.ex", many)
    assert not verdict.passed and "method calls" in verdict.message


@pytest.mark.parametrize("answer", [10**400, -10**400, "9" * 400 + " MiB"],
                         ids=["huge int", "huge negative", "huge size text"])
def test_numeric_questions_refuse_numbers_no_float_holds(answer):
    questions = [q for b in all_banks() for q in b.questions if q.kind in ("numeric", "predict")]
    assert questions
    for q in questions:
        try:
            evaluate(q, answer, 0, "seed")
        except AnswerError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 300


def bank_text(questions_yaml, title="t"):
    return f"notebook: '02'\ntitle: {title}\nquestions: {questions_yaml}\n"


@pytest.mark.parametrize("text, match", [
    (bank_text("[" * 50_000 + "]" * 50_000), "nested too deeply"),
    ("notebook: '02'\ntitle: t\nquestions:\n" + "".join("  " * i + "- a:\n" for i in range(1500)),
     "nested too deeply"),
    (bank_text("[{id: '02.1', kind: text, prompt: p, salt: s, answer_hashes: ['" + "0" * 64
               + "'], points: " + "9" * 400 + "}]"), "'points' must be a positive number"),
])
def test_a_hostile_bank_is_refused_in_one_line(tmp_path, text, match):
    path = tmp_path / "02_bank.yaml"
    path.write_text(text)
    with pytest.raises(BankError, match=match) as info:
        load_bank_file(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("data", [
    {"questions": {"02.1": []}},
    {"questions": {"02.1": {"attempts": "x", "correct": True, "points": 1, "max_points": 1}}},
    {"questions": {}, "predictions": []},
    {"questions": {}, "predictions": {"p": {"attempts": []}}},
    {"questions": {}, "exercises": {"05.ex": {"attempts": "x"}}},
    {"questions": {}, "seed": [1]},
])
def test_a_progress_file_with_wrong_inner_types_keeps_working(tmp_path, monkeypatch, capsys,
                                                             data):
    monkeypatch.delenv("GPUMEMLAB_QUIZ_SEED", raising=False)
    good = {"attempts": 2, "correct": True, "points": 1.0, "max_points": 1.0}
    data["questions"]["02.9"] = good
    path = tmp_path / "progress.json"
    path.write_text(json.dumps(data))
    p = Progress(path)
    assert p.entry("02.9") == good   # the well-formed entries are kept
    p.record("02.1", True, 1.0, 1.0)
    p.record_prediction("p", value=1)
    p.record_exercise("05.ex", True)
    assert isinstance(p.seed, str)
    assert p.attempts("02.1") == 1 and p.prediction("p")["value"] == 1
    assert json.loads((tmp_path / "progress.json.bad").read_text()) == data   # nothing lost
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "wrong types" in err[0]


def test_the_quiz_widget_escapes_the_bank_title(tmp_path, monkeypatch):
    pytest.importorskip("ipywidgets")
    from gpumemlab.quizkit.bank import bank_path, quizzes_dir
    from gpumemlab.quizkit.core import Quiz
    from gpumemlab.quizkit.widgets import QuizView

    shipped = bank_path("02", quizzes_dir()).read_text(encoding="utf-8")
    lines = shipped.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("title:"))
    lines[i] = "title: '<img src=x onerror=alert(1)>'"
    (tmp_path / "02_hostile.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setenv("GPUMEMLAB_QUIZZES", str(tmp_path))
    quiz = Quiz(tmp_path / "progress.json")
    view = QuizView(quiz, quiz.bank("02"))
    html = view.widget.children[0].value
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img" not in view._repr_mimebundle_()["text/html"]

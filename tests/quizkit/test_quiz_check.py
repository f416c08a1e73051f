"""gml.quiz: checks, hints, explanations, progress, predict variants and code exercises."""
import pytest

from gpumemlab.quizkit import Quiz
from gpumemlab.quizkit.bank import load_bank
from gpumemlab.quizkit.checker import AnswerError, evaluate
from gpumemlab.quizkit.generators import make_variant


@pytest.fixture
def quiz(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUMEMLAB_PROGRESS", str(tmp_path / "progress.json"))
    monkeypatch.setenv("GPUMEMLAB_HEADLESS", "1")
    monkeypatch.delenv("GPUMEMLAB_QUIZ_SEED", raising=False)
    return Quiz()


def right_letter(q):
    return next(x for x in "abcdefgh"[:len(q.data["options"])] if evaluate(q, x).correct)


def test_check_prints_deterministic_feedback_with_growing_hints(quiz, capsys):
    q = load_bank("02").get("02.2")
    wrong = [x for x in "abcd" if x != right_letter(q)]
    quiz.check("02.2", wrong[0])
    first = capsys.readouterr().out
    quiz.check("02.2", wrong[1])
    second = capsys.readouterr().out
    assert first.startswith("✗ 02.2 not yet.") and "Hint 1:" in first and "Hint 2:" not in first
    assert "Hint 2:" in second and "Why:" not in second
    quiz.check("02.2", wrong[2])   # third miss: the explanation is shown
    assert "Why: " + q.explanation in capsys.readouterr().out
    quiz.check("02.2", right_letter(q).upper())
    out = capsys.readouterr().out
    assert out.startswith("✓ 02.2 correct (1/1 points).") and "Hint" not in out


def test_unreadable_answers_say_what_is_expected_and_do_not_count(quiz, capsys):
    quiz.check("02.1", 3)
    assert "answer with the letter of an option" in capsys.readouterr().out
    quiz.check("02.1", "z")
    assert "not one of the options" in capsys.readouterr().out
    assert quiz.progress().attempts("02.1") == 0
    with pytest.raises(KeyError, match="no question '02.99'"):
        quiz.check("02.99", "a")


def test_numeric_answers_accept_units_and_tolerance(quiz):
    assert quiz.evaluate("01.2", 20).correct
    assert quiz.evaluate("01.2", "20 MiB").correct
    assert quiz.evaluate("01.2", "20971520 bytes").correct
    assert not quiz.evaluate("01.2", 2).correct
    wrong3 = [quiz.evaluate("01.2", 2, record=True) for _ in range(3)][-1]
    assert "The simulated GPU gives 20 MiB." in wrong3.text
    assert quiz.evaluate("08.3", 0.8535).correct       # tolerance 0.001


def test_a_count_may_be_typed_with_what_it_counts(quiz):
    # 15.3 asks how many of 70 tokens a later request reuses (unit: count); "64 tokens" is how a
    # learner writes it, and was refused as "cannot read '64 tokens' as a number"
    assert quiz.evaluate("15.3", "64 tokens").correct and quiz.evaluate("15.3", "64").correct
    assert not quiz.evaluate("15.3", "70 tokens").correct
    with pytest.raises(AnswerError, match="is a size; this question asks for a count"):
        quiz.evaluate("15.3", "64 MiB")                 # a size unit is not what is counted
    with pytest.raises(AnswerError, match="cannot read"):
        quiz.evaluate("15.3", "tokens")


def test_predict_variants_depend_on_the_seed_and_are_checked_by_the_simulator(quiz,
                                                                              monkeypatch):
    q = load_bank("01").get("01.7")
    variants = {make_variant(q, seed).ops for seed in range(12)}
    assert len(variants) > 3
    monkeypatch.setenv("GPUMEMLAB_QUIZ_SEED", "learner-7")
    v = make_variant(q, "learner-7")
    expected = v.answer()
    assert quiz.evaluate("01.7", expected).correct
    assert not quiz.evaluate("01.7", expected + 2).correct
    yes_no = load_bank("02").get("02.4")
    answers = {make_variant(yes_no, s).answer() for s in range(10)}
    assert answers == {"yes", "no"}   # the OOM question is not always the same answer


def test_code_exercises_are_graded_against_the_model(quiz):
    def round_size(size):
        return max(512, -(-size // 512) * 512)

    assert quiz.evaluate("01.5", round_size).correct
    bad = quiz.evaluate("01.5", lambda size: size)
    assert not bad.correct and "round_size(0) returned 0; the allocator gives 512" in bad.text
    crash = quiz.evaluate("01.5", lambda size: 1 // 0)
    assert "raised ZeroDivisionError" in crash.text

    def should_split(block_size, size, small):
        remaining = block_size - size
        return remaining >= 512 if small else remaining > 1024 * 1024

    assert quiz.evaluate("05.4", should_split).correct
    assert not quiz.evaluate("05.4", lambda b, s, small: b - s >= 512).correct


def test_assert_correct_raises_with_the_feedback(quiz):
    quiz.assert_correct("01.2", 20)
    with pytest.raises(AssertionError, match="01.2 not yet"):
        quiz.assert_correct("01.2", 21)


def test_summary_tracks_progress_across_notebooks(quiz, capsys):
    q = load_bank("00").get("00.1")
    quiz.check("00.1", right_letter(q))
    quiz.check("01.2", 20)
    capsys.readouterr()
    quiz.summary()
    out = capsys.readouterr().out
    lines = {line[:2]: line for line in out.splitlines()}
    assert "1/5" in lines["00"] and "1/8" in lines["01"] and "0/7" in lines["02"]
    assert out.splitlines()[-1].startswith("total")
    got, total = quiz.score()
    assert got == 2 and total == sum(q.points for b in __import__(
        "gpumemlab.quizkit.bank", fromlist=["all_banks"]).all_banks() for q in b.questions)
    quiz.reset("00")
    assert quiz.score()[0] == 1


def test_quiz_call_prints_the_questions_headless(quiz, capsys):
    quiz("02")
    out = capsys.readouterr().out
    assert out.startswith("Quiz 02: Fragmentation") and "02.7" in out and "a) " in out


def test_damaged_progress_file_is_set_aside(quiz, tmp_path):
    (tmp_path / "progress.json").write_text("{broken")
    quiz.check("01.2", 20)
    assert (tmp_path / "progress.json.bad").exists()
    assert quiz.progress().entry("01.2")["correct"]


def test_widget_view_checks_through_the_same_model(quiz):
    pytest.importorskip("ipywidgets")
    from gpumemlab.quizkit.widgets import QuizView

    view = QuizView(quiz, quiz.bank("02"))
    assert view.answer("02.7", "1 MiB").startswith("✗ 02.7 not yet.")
    assert view.answer("02.7", "36 MiB").startswith("✓ 02.7 correct")
    assert "score: 1 / " in view.score.value

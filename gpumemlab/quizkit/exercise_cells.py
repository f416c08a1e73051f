"""``gml.exercise``: the learner-facing side of the lesson exercises (``lesson_exercises``).

    gml.exercise("05.ex")                        # the task, and the shape of the answer
    my_setting = ""                              # the stub the notebook ships: it fails clearly
    gml.exercise.check("05.ex", my_setting)      # runs it on the simulated GPU, says why
    gml.exercise.check("07.ex", lambda: 2 ** 5)  # or code that computes the answer

A failed attempt shows one more hint from the exercise's ladder; attempts are kept in the progress
file (``exercises``). An answer that raises (code passed as a function) prints the learner's error
and the next hint; nothing raises into the lesson, so the notebook runs on. An answer of the wrong
shape is not counted (as for the quizzes): one line says what shape is expected, and no hint. The
stub the lesson ships is no attempt: checking it records nothing, and its line says where the
learner stands ("not tried yet", the attempts so far, or solved), as the task's header does, so
running a lesson top to bottom (again, after solving) spends no attempt and shows no hint. ``assert_passes`` is for graded test cells; the classroom grader can instead send the plain
answer to ``lesson_exercises.judge_json`` outside the student's process.
"""
from __future__ import annotations

from .lesson_exercises import AnswerShapeError, Verdict, get, judge, plain
from .progress import Progress


def is_stub(ex, answer) -> bool:
    """Whether ``answer`` is the stub the lesson ships (not the learner's attempt)."""
    if callable(answer):
        return False
    try:
        return plain(answer) == plain(ex.stub)
    except AnswerShapeError:
        return False


class Exercises:
    def __init__(self, progress_path=None):
        self._progress_path = progress_path

    def progress(self) -> Progress:
        return Progress(self._progress_path)

    def __call__(self, exercise_id: str) -> None:
        """Print the task of ``exercise_id``."""
        print(self.text(exercise_id))

    @staticmethod
    def state(entry: dict) -> str:
        """Where the learner stands on one exercise, in the words the header and the stub's line
        share: "solved", "N attempt(s) so far" or "not tried yet"."""
        attempts = entry.get("attempts", 0)
        return ("solved" if entry.get("passed") else
                f"{attempts} attempt{'s' if attempts != 1 else ''} so far" if attempts else
                "not tried yet")

    def text(self, exercise_id: str) -> str:
        ex = get(exercise_id)
        state = self.state(self.progress().exercise(ex.id))
        return (f"Exercise {ex.id}: {ex.title} ({state})\n{ex.task}\n"
                f"Answer: {ex.expects}. Check with gml.exercise.check({ex.id!r}, answer).")

    def verdict(self, exercise_id: str, answer) -> Verdict:
        """Judge without recording. ``answer`` may be a function of no arguments returning it."""
        ex = get(exercise_id)
        if callable(answer):
            try:
                answer = answer()
            except Exception as exc:  # the learner's code: report it, never stop the lesson
                return Verdict(ex.id, False, f"your code raised {type(exc).__name__}: {exc}")
        return judge(ex.id, answer)

    def check(self, exercise_id: str, answer) -> None:
        """Judge ``answer``, record the attempt, print the verdict and the next hint. The
        exercise's own stub is no attempt: running the lesson top to bottom records nothing."""
        ex = get(exercise_id)
        if is_stub(ex, answer):
            print(f"· {ex.id} {self.state(self.progress().exercise(ex.id))}: the answer here is "
                  f"the stub the lesson ships ({ex.stub!r}), so nothing is checked; put yours in "
                  f"its place and run this cell again.")
            return
        verdict = self.verdict(ex.id, answer)
        if not verdict.counted:   # a wrong shape is never run: no attempt, no hint
            print(f"· {ex.id} not counted: {verdict.message}")
            return
        entry = self.progress().record_exercise(ex.id, verdict.passed)
        print(self.feedback(ex, verdict, entry))

    @staticmethod
    def feedback(ex, verdict: Verdict, entry: dict) -> str:
        if verdict.passed:
            return f"✓ {ex.id} solved: {verdict.message}"
        lines = [f"✗ {ex.id} not yet: {verdict.message}"]
        failed = entry.get("attempts", 1) - (1 if entry.get("passed") else 0)
        if ex.hints:
            k = max(1, min(failed, len(ex.hints)))
            lines += [f"Hint {i}/{len(ex.hints)}: {h}" for i, h in enumerate(ex.hints[:k], 1)]
        return "\n".join(lines)

    def assert_passes(self, exercise_id: str, answer) -> None:
        """Raise AssertionError with the verdict unless ``answer`` passes (for test cells)."""
        verdict = self.verdict(exercise_id, answer)
        if not verdict.passed:
            raise AssertionError(verdict.message)

    def reset(self, notebook=None) -> None:
        prefix = "" if notebook is None else f"{str(notebook).zfill(2)}."
        self.progress().reset(prefix, tables=("exercises",))

    def __repr__(self):
        return "gml.exercise: gml.exercise('05.ex') shows a task, gml.exercise.check(id, answer)"


__all__ = ["Exercises"]

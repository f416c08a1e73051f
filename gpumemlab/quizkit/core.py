"""``gml.quiz``: the learner-facing quiz object (widgets, plain-code checks, a progress summary).

    gml.quiz("02")                  # the notebook's questions as widgets (text when headless)
    gml.quiz.check("02.3", "b")     # prints deterministic feedback, records the attempt
    gml.quiz.summary()              # progress over every notebook, from the local progress file
    gml.quiz.assert_correct("02.3", answer)   # for graded test cells: raises AssertionError

Banks are parsed again only when their file changes (``bank.load_bank_file`` keeps the parsed
bank with the file's inode, mtime and size); progress is re-read on every call, so two notebooks
open at once do not overwrite each other's attempts.
"""
from __future__ import annotations

import os

from gpumemlab.certificates.issue import self_study_record

from .bank import BankError, all_banks, load_bank, notebook_key
from .checker import AnswerError, evaluate, render_question
from .progress import Progress
from .widgets import QuizView


class Quiz:
    def __init__(self, progress_path=None):
        self._progress_path = progress_path

    # -- lookup --
    def bank(self, notebook):
        return load_bank(notebook_key(notebook))

    def question_obj(self, question_id: str):
        if not isinstance(question_id, str) or "." not in question_id:
            raise ValueError(f"question ids look like '02.3', got {question_id!r}")
        return self.bank(question_id.split(".")[0]).get(question_id)

    def progress(self) -> Progress:
        return Progress(self._progress_path)

    # -- learner API --
    def __call__(self, notebook):
        """Show the questions of ``notebook`` as widgets, or as text when widgets cannot show.
        Returns the view (shown once, as the cell's value, with a static HTML copy)."""
        bank = self.bank(notebook)
        if os.environ.get("GPUMEMLAB_HEADLESS") or not _widgets_available():
            print(self.text(notebook))
            return None

        return QuizView(self, bank)

    def text(self, notebook) -> str:
        bank = self.bank(notebook)
        seed = self.progress().seed
        parts = [f"Quiz {bank.notebook}: {bank.title}"]
        parts += [render_question(q, seed) for q in bank.questions]
        parts.append(f"Answer in code with gml.quiz.check(\"{bank.questions[0].id}\", answer).")
        return "\n\n".join(parts)

    def question(self, question_id: str) -> None:
        print(render_question(self.question_obj(question_id), self.progress().seed))

    def evaluate(self, question_id: str, answer, record: bool = False):
        """Judge ``answer``; with ``record`` count the attempt. Returns a checker.Result."""
        q = self.question_obj(question_id)
        progress = self.progress()
        result = evaluate(q, answer, progress.attempts(q.id), progress.seed)
        if record:
            progress.record(q.id, result.correct, result.points, result.max_points)
        return result

    def check(self, question_id: str, answer) -> None:
        """Print feedback for ``answer`` and record the attempt (unreadable answers are not
        counted: the message says what shape of answer is expected)."""
        try:
            result = self.evaluate(question_id, answer, record=True)
        except AnswerError as exc:
            print(f"? {exc}")
            return
        print(result.text)

    def assert_correct(self, question_id: str, answer) -> None:
        """Raise AssertionError with the feedback unless ``answer`` is right (for test cells)."""
        try:
            result = self.evaluate(question_id, answer)
        except AnswerError as exc:
            raise AssertionError(str(exc)) from None
        if not result.correct:
            raise AssertionError(result.text)

    def summary(self) -> None:
        print(self.summary_text())

    def summary_text(self) -> str:
        progress = self.progress()
        rows, got, total = [], 0.0, 0.0
        for bank in all_banks():
            entries = [progress.entry(q.id) for q in bank.questions]
            answered = sum(1 for e in entries if e["attempts"])
            correct = sum(1 for e in entries if e["correct"])
            points = sum(e["points"] for e in entries)
            max_points = sum(q.points for q in bank.questions)
            got, total = got + points, total + max_points
            rows.append(f"{bank.notebook:<4}{bank.title[:38]:<40}{answered:>3}/{len(entries):<4}"
                        f"{correct:>6}   {_n(points):>5}/{_n(max_points)}")
        head = f"{'nb':<4}{'title':<40}{'answered':<10}{'correct':<8}{'points':>8}"
        pct = 100.0 * got / total if total else 0.0
        return "\n".join([f"Quiz progress ({progress.path})", head, *rows,
                          f"{'total':<62}{_n(got):>5}/{_n(total)} ({pct:.0f}%)"])

    def score(self):
        """(points, max_points) over every bank."""
        progress = self.progress()
        banks = all_banks()
        got = sum(progress.entry(q.id)["points"] for b in banks for q in b.questions)
        return got, sum(q.points for b in banks for q in b.questions)

    def certificate(self, name: str, threshold: float = 0.8, out=".", **kw):
        """Write an UNSIGNED self-study completion record (HTML + PNG) into ``out`` when your
        points reach ``threshold`` of all questions; otherwise say how far you are. Returns the
        paths or None. Only a teacher's signed certificate can be verified."""

        return self_study_record(self, name, threshold=threshold, out=out, **kw)

    def reset(self, notebook=None) -> None:
        """Forget recorded answers (of one notebook, or all)."""
        prefix = "" if notebook is None else notebook_key(notebook) + "."
        self.progress().reset(prefix)

    def __repr__(self):
        return "gml.quiz: call gml.quiz('02') for a notebook's questions; see help(gml.quiz)"


def _n(x):
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def _widgets_available() -> bool:
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


__all__ = ["Quiz", "BankError", "AnswerError"]

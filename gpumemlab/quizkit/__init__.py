"""Quizzes and classroom grading: question banks, ``gml.quiz``, the student-version maker and
the grader. ``quiz`` is the learner object; see ``gpumemlab.quizkit.core``. Importing this package
reads no bank and imports no widget library."""
from __future__ import annotations

from .bank import BankError
from .checker import AnswerError
from .core import Quiz

quiz = Quiz()

__all__ = ["quiz", "Quiz", "BankError", "AnswerError"]

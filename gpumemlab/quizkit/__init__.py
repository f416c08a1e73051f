"""Quizzes: question banks, ``gml.quiz`` and its cells, answer checking and progress. ``quiz`` is
the learner object; see ``gpumemlab.quizkit.core``. The classroom grader lives in
``gpumemlab.classroom``. Importing this package reads no bank and imports no widget library."""
from __future__ import annotations

from .bank import BankError
from .checker import AnswerError
from .core import Quiz

quiz = Quiz()

__all__ = ["quiz", "Quiz", "BankError", "AnswerError"]

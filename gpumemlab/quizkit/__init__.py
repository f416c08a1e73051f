"""Quizzes: question banks, ``gml.quiz`` and its cells, answer checking and progress. ``quiz`` is
the learner object; see ``gpumemlab.quizkit.core``. Predict cells (``gml.predict``,
``gml.reveal``) are in ``predict``, what their answers are judged by (units, tolerances,
misconceptions, the lessons' registered questions) in ``predict_rules``; lesson exercises
(``gml.exercise``) in ``exercise_cells`` and ``lesson_exercises``. The classroom grader lives in
``gpumemlab.classroom``. Importing this package reads no bank and imports no widget library."""
from __future__ import annotations

from .bank import BankError
from .checker import AnswerError
from .core import Quiz
from .exercise_cells import Exercises
from .predict import Predictions

quiz = Quiz()
predict = Predictions()
reveal = predict.reveal
exercise = Exercises()

__all__ = ["quiz", "Quiz", "BankError", "AnswerError", "predict", "reveal", "exercise",
           "Predictions", "Exercises"]

"""Lesson exercises: the learner changes something (a setting, an order, a batch size), and a judge
runs it on the simulated GPU and says whether it does what the task asks.

An exercise is judged by a function of **plain data** (str, int, float, bool, lists and dicts of
these: what survives ``json.dumps``), never of the learner's objects. So the same judge runs in
the notebook (``gml.exercise.check``) and in the classroom grader, which receives the answer as
JSON from the student's sandbox and calls :func:`judge_json` in its own process. A judge returns a
:class:`Verdict` with the measured figures that decided it; a malformed answer (a setting c10
would refuse, a list with a missing name) becomes a failed verdict whose message says what was
expected, never an exception, and is not counted as an attempt (``Verdict.counted``). The exercises themselves belong to the lessons
(``gpumemlab.lessons``, one module per lesson), which register them here when imported: reach
these functions through ``gpumemlab.lessons`` so that every lesson's exercise is known. Every
right answer is found by running the simulator at judge time, not typed in.
"""
from __future__ import annotations

import json

from gpumemlab.allocator.oom import OutOfMemoryError as SimulatedOOM

from .exercise_base import (REGISTRY, AnswerShapeError, LessonExercise, Verdict,  # noqa: F401
                            exercise, plain)


def get(ex_id: str) -> LessonExercise:
    try:
        return REGISTRY[ex_id]
    except KeyError:
        known = ", ".join(sorted(REGISTRY)) or "none (import gpumemlab.lessons to register them)"
        raise KeyError(f"no exercise {ex_id!r}; known: {known}") from None


def all_exercises() -> list:
    return [REGISTRY[k] for k in sorted(REGISTRY)]


def judge(ex_id: str, answer) -> Verdict:
    """Judge ``answer`` (plain data) for exercise ``ex_id``. Never raises for a bad answer."""
    ex = get(ex_id)
    try:
        passed, message, figures = ex.judge(plain(answer))
    except AnswerShapeError as exc:
        # never run, so no attempt: the message is the one line saying what shape is expected
        return Verdict(ex_id, False, f"{str(exc).rstrip('.')}. Expected {ex.expects}.",
                       counted=False)
    except SimulatedOOM as exc:   # the answer asks the simulated card for more than it has
        said = ". ".join(str(exc).split(". ")[:2])[:160]   # "CUDA out of memory. Tried to ..."
        return Verdict(ex_id, False, f"the answer does not fit on the simulated card: {said}. "
                                     f"Expected {ex.expects}.")
    except (OverflowError, MemoryError, RecursionError) as exc:   # a value past what it models
        return Verdict(ex_id, False, f"the answer could not be judged ({type(exc).__name__}: "
                                     f"{str(exc)[:120]}). Expected {ex.expects}.")
    return Verdict(ex_id, bool(passed), message, plain(figures))


def judge_json(ex_id: str, answer_json: str) -> dict:
    """The grader's entry point: the answer as JSON text in, the verdict as a dict out."""
    try:
        answer = json.loads(answer_json)
    except (TypeError, ValueError) as exc:
        return Verdict(ex_id, False, f"the answer is not JSON ({exc})").to_dict()
    return judge(ex_id, answer).to_dict()


__all__ = ["Verdict", "LessonExercise", "AnswerShapeError", "REGISTRY", "exercise", "get",
           "all_exercises", "judge", "judge_json", "plain"]

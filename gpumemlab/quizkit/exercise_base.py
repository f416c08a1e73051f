"""The parts every lesson exercise is made of: ``LessonExercise`` (the task, the hint ladder, the
stub the notebook ships, the judge), ``Verdict``, the ``exercise`` decorator that registers a judge,
and ``plain`` (answers are plain JSON data); and the answer parsers judges share (``size_answer``,
``sizes_answer``, ``whole_mib_answer``, ``alloc_conf_answer``, ``exact``). See ``lesson_exercises``
for the contract; the lessons' own exercises are in ``gpumemlab.lessons``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.units import format_size, parse_size


@dataclass(frozen=True)
class Verdict:
    """The outcome of judging one answer: ``passed``, a message in words, and the figures.
    ``counted`` is False for an answer of the wrong shape: it was never run, so it is no attempt
    (as for the quizzes, docs/QUIZZES.md)."""
    exercise_id: str
    passed: bool
    message: str
    figures: dict = field(default_factory=dict)
    counted: bool = True

    def to_dict(self) -> dict:
        return {"exercise_id": self.exercise_id, "passed": self.passed, "message": self.message,
                "figures": dict(self.figures)}


@dataclass(frozen=True)
class LessonExercise:
    id: str                 # "05.ex"
    title: str
    task: str               # what to change, in words
    expects: str            # the shape of the answer: "an alloc_conf string", ...
    judge: object           # (answer: plain data) -> (passed, message, figures)
    hints: tuple = ()       # the ladder: one more after each failed attempt
    stub: object = None     # what the notebook ships: it must fail; checking it is no attempt


REGISTRY = {}


class AnswerShapeError(ValueError):
    """An answer that is not of the shape the exercise expects; its text says what is."""


def exercise(ex_id, title, task, expects, hints, stub):
    """Register the decorated judge as exercise ``ex_id``."""
    def register(fn):
        REGISTRY[ex_id] = LessonExercise(ex_id, title, task, expects, fn, tuple(hints), stub)
        return fn
    return register




MIB = 1 << 20
DEPTH_LIMIT, INT_BITS = 20, 64   # no exercise's answer is deeper, or needs larger integers


def plain(value, path="answer", depth=0):
    """``value`` if it is plain JSON data of a bounded shape (nesting, integer size), else
    AnswerShapeError naming the offending part."""
    if depth > DEPTH_LIMIT:
        raise AnswerShapeError(f"{path[:60]}... is nested more than {DEPTH_LIMIT} deep")
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > INT_BITS:
        raise AnswerShapeError(f"{path} is an integer of {value.bit_length()} bits (at most "
                               f"{INT_BITS})")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: plain(v, f"{path}[{k[:40]!r}]", depth + 1) for k, v in value.items()}
    raise AnswerShapeError(f"{path} is a {type(value).__name__}: an answer must be plain data "
                           f"(numbers, strings, lists, dicts)")


def size_answer(answer, name: str = "the size") -> int:
    """``answer`` (an int of bytes or a string like '3 MiB') in bytes; a wrong shape is the
    learner's AnswerShapeError, not a traceback."""
    try:
        return parse_size(answer, name=name)
    except (TypeError, ValueError) as exc:
        raise AnswerShapeError(str(exc)) from None



def numbered_answer(answer, count: int, noun: str) -> list:
    """``answer`` as a plan of numbered things (tensors, layers): a list of ints, each 0 to
    ``count - 1``, returned sorted without repeats; anything else is AnswerShapeError."""
    if not isinstance(answer, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in answer):
        raise AnswerShapeError(f"the answer is a list of {noun} numbers, 0 to {count - 1}")
    wrong = [i for i in answer if not 0 <= i < count]
    if wrong:
        raise AnswerShapeError(f"the {noun}s are numbered 0 to {count - 1}; {wrong[:5]} are not "
                               f"among them")
    return sorted(set(answer))

def whole_mib_answer(answer, name: str = "the answer") -> int:
    """``answer`` as a whole number of MiB (the unit of PyTorch's ``*_mb`` settings), in MiB: an
    int, a float with no fraction (8.0), a bare number as text ("8") or a size with a unit
    ("8 MiB", "8M"); anything else, or not a whole MiB, is AnswerShapeError."""
    if isinstance(answer, bool):
        raise AnswerShapeError(f"{name} is a bool, not a whole number of MiB")
    if isinstance(answer, float) and answer.is_integer():
        answer = int(answer)
    elif isinstance(answer, str) and answer.strip().isdigit():
        answer = int(answer.strip())
    elif isinstance(answer, str):
        n = size_answer(answer, name=name)
        if n % MIB:
            raise AnswerShapeError(f"{name} is {exact(n)}, not a whole number of MiB")
        answer = n // MIB
    if not isinstance(answer, int) or not 0 <= answer < 1 << (INT_BITS - 20):  # bytes in 64 bits
        raise AnswerShapeError(f"{name} is a whole number of MiB, 0 or more (N, N.0 "
                               f"or 'N MiB'), not {answer!r}"[:160])
    return answer


def sizes_answer(answer, count: int) -> list:
    """``answer`` as ``count`` request sizes in bytes (ints or strings like '3 MiB')."""
    if not isinstance(answer, list) or len(answer) != count:
        raise AnswerShapeError(f"the answer must be a list of {count} sizes")
    return [size_answer(value, name=f"size {i}") for i, value in enumerate(answer)]


def exact(n: int) -> str:
    """A size and its byte count, for answers judged to the byte."""
    return f"{format_size(n)} ({n:,} bytes)"


def alloc_conf_answer(answer) -> str:
    """``answer`` as a settings string c10 accepts, or AnswerShapeError with c10's complaint."""
    from gpumemlab.allocator.config import AllocatorConfig

    if not isinstance(answer, str):
        raise AnswerShapeError(f"the answer is a {type(answer).__name__}, not a settings string")
    try:
        AllocatorConfig.parse(answer)
    except (TypeError, ValueError) as exc:
        raise AnswerShapeError(f"c10 would refuse {answer!r}: {exc}") from None
    return answer

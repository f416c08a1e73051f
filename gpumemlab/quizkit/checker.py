"""Judge one answer to one question and word the feedback, deterministically.

``evaluate(question, answer, attempts_before, seed)`` does no printing and keeps no state, so the
widget view, ``quiz.check`` and the classroom tests all share it. Hints grow with the attempts;
after ``REVEAL_AFTER`` wrong attempts the explanation (and a computed answer) is shown.
An answer that cannot be read at all raises ``AnswerError`` and does not count as an attempt.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..units import parse_size
from .answers import matches, normalise_text
from .bank import UNITS, Question
from .compute import compute
from .exercises import EXERCISES, run_exercise
from .generators import make_variant

REVEAL_AFTER = 3


class AnswerError(ValueError):
    """An answer of the wrong shape (e.g. a list for a multiple-choice question)."""


@dataclass(frozen=True)
class Result:
    question_id: str
    correct: bool
    points: float
    max_points: float
    feedback: str = ""
    hints: tuple = ()
    explanation: str = ""

    @property
    def text(self) -> str:
        if self.correct:
            lines = [f"✓ {self.question_id} correct ({_num(self.points)}/"
                     f"{_num(self.max_points)} points)."]
        else:
            lines = [f"✗ {self.question_id} not yet."]
        if self.feedback:
            lines.append(self.feedback)
        lines += [f"Hint {i}: {h}" for i, h in enumerate(self.hints, 1)]
        if self.explanation:
            lines.append(f"Why: {self.explanation}")
        return "\n".join(lines)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def evaluate(question: Question, answer, attempts_before: int = 0, seed="0") -> Result:
    correct, feedback, reveal = _JUDGES[question.kind](question, answer, seed)
    attempt = attempts_before + 1
    hints = () if correct else question.shown_hints(attempt)
    explanation = ""
    if correct or attempt >= REVEAL_AFTER:
        explanation = question.explanation
        if not correct and reveal is not None:
            explanation = (explanation + " " if explanation else "") + reveal
    return Result(question.id, correct, question.points if correct else 0.0, question.points,
                  feedback, hints, explanation)


# -- judges: (question, answer, seed) -> (correct, feedback, revealed answer or None) --

def _letters(n):
    return "abcdefgh"[:n]


def choice_letter(question: Question, answer) -> str:
    """Read a choice answer: a letter ('b', 'B', '(b)') or the full text of an option."""
    options = question.data["options"]
    if isinstance(answer, bool) or not isinstance(answer, str):
        raise AnswerError(f"{question.id}: answer with the letter of an option, e.g. 'b' "
                          f"(got {type(answer).__name__})")
    text = normalise_text(answer)
    letters = _letters(len(options))
    if len(text) == 1 and text in letters:
        return text
    for letter, opt in zip(letters, options):
        if normalise_text(opt["text"]) == text:
            return letter
    raise AnswerError(f"{question.id}: {answer!r} is not one of the options "
                      f"{', '.join(letters)}")


def _judge_choice(q, answer, seed):
    letter = choice_letter(q, answer)
    correct = matches(q.id, letter, q.data["salt"], [q.data["answer_hash"]])
    return correct, q.option_feedback(_letters(8).index(letter)), None


def _judge_text(q, answer, seed):
    if not isinstance(answer, str) or not answer.strip():
        raise AnswerError(f"{q.id}: answer with a short piece of text")
    return matches(q.id, answer, q.data["salt"], q.data["answer_hashes"]), "", None


def read_number(qid: str, answer, unit: str) -> float:
    """A number in ``unit``: 20, 20.0, "20", or a size with its own unit like "20 MiB"."""
    try:
        value = _number(qid, answer, unit)
    except OverflowError:   # an int or a size past what a float holds
        raise AnswerError(f"{qid}: the answer is too large to be a number of {unit}") from None
    if not math.isfinite(value):
        raise AnswerError(f"{qid}: {_short(answer)} is not a finite number")
    return value


def _short(answer) -> str:
    text = repr(answer) if not isinstance(answer, int) or answer.bit_length() < 200 else \
        f"an integer of {answer.bit_length()} bits"
    return text if len(text) <= 80 else text[:80] + "..."


def _number(qid: str, answer, unit: str) -> float:
    if isinstance(answer, bool):
        raise AnswerError(f"{qid}: answer with a number (in {unit}), not {answer!r}")
    if isinstance(answer, (int, float)):
        value = float(answer)
    elif isinstance(answer, str):
        text = answer.strip().replace(",", "").replace("_", "")
        try:
            value = float(text)
        except ValueError:
            if unit in ("count", "percent"):
                return _count_with_noun(qid, answer, text, unit)
            if unit not in ("bytes", "KiB", "MiB", "GiB"):
                raise AnswerError(f"{qid}: cannot read {_short(answer)} as a number") from None

            try:
                # a learner types a size as the lesson prints it, "14.90 GiB": to the byte below
                value = parse_size(text.replace(" ", ""), name="answer",
                                   round_down=True) / UNITS[unit]
            except (TypeError, ValueError) as exc:
                raise AnswerError(f"{qid}: {exc}") from None
    else:
        raise AnswerError(f"{qid}: answer with a number (in {unit}), "
                          f"not {type(answer).__name__}")
    return value


# A count as a learner types it: the number, then the thing counted ("64 tokens", "3 segments",
# "2 cudaMalloc calls"); a percent may carry its sign ("12.5 %").
_COUNTED = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))\s*"
                      r"([A-Za-z][A-Za-z'-]*(?:\s+[A-Za-z][A-Za-z'-]*){0,3}|%)$")


def _count_with_noun(qid: str, answer, text: str, unit: str) -> float:
    """The number of a count typed with its noun. A size unit is not a noun: "64 MiB" for a
    count is refused, since the question counts things, not bytes."""
    found = _COUNTED.match(text.strip())
    noun = found[2].lower() if found else ""
    fits = noun in ("%", "percent") if unit == "percent" else bool(noun) and noun != "%"
    if not fits:
        raise AnswerError(f"{qid}: cannot read {_short(answer)} as a number"
                          + (" (a count, optionally followed by what it counts)"
                             if unit == "count" else " (a percent, optionally with %)"))
    if noun in _SIZE_WORDS:
        raise AnswerError(f"{qid}: {_short(answer)} is a size; this question asks for a count "
                          f"(a number, optionally followed by what it counts)")
    return float(found[1])


_SIZE_WORDS = {"b", "byte", "bytes", "kb", "mb", "gb", "tb", "k", "m", "g", "t", "kib", "mib",
               "gib", "tib"}


def _close(got: float, expected: float, tolerance: float) -> bool:
    return abs(got - expected) <= tolerance + 1e-9 * max(1.0, abs(expected))


def expected_in_unit(spec: dict, unit: str) -> float:
    """The key in the question's unit: a simulator measurement is bytes, an ``expr`` is
    already written in the unit (docs/QUIZZES.md: ``... / MiB``)."""
    value = compute(spec)
    return value if "expr" in spec else value / UNITS[unit]


def _judge_numeric(q, answer, seed):

    unit = q.data["unit"]
    expected = expected_in_unit(q.data["compute"], unit)
    got = read_number(q.id, answer, unit)
    return _close(got, expected, q.data.get("tolerance", 0)), "", \
        f"The simulated GPU gives {_num(round(expected, 6))} {unit}."


def read_yes_no(qid: str, answer) -> str:
    if isinstance(answer, bool):
        return "yes" if answer else "no"
    if isinstance(answer, str) and normalise_text(answer) in ("yes", "no", "y", "n", "true",
                                                             "false"):
        return "yes" if normalise_text(answer) in ("yes", "y", "true") else "no"
    raise AnswerError(f"{qid}: answer 'yes' or 'no' (or True/False)")


def _judge_predict(q, answer, seed):

    variant = make_variant(q, seed)
    expected = variant.answer()
    if variant.unit == "yes/no":
        return read_yes_no(q.id, answer) == expected, "", f"The simulated GPU says: {expected}."
    got = read_number(q.id, answer, variant.unit)
    return _close(got, expected, 0), "", \
        f"The simulated GPU gives {_num(round(expected, 6))} {variant.unit}."


def _judge_code(q, answer, seed):

    passed, _, _, message = run_exercise(q.data["exercise"], answer)
    return passed, message, None


_JUDGES = {"choice": _judge_choice, "text": _judge_text, "numeric": _judge_numeric,
           "predict": _judge_predict, "code": _judge_code}


def render_question(question: Question, seed="0") -> str:
    """The plain-text form of a question, as a learner sees it (with their variant)."""
    lines = [f"{question.id} ({_num(question.points)} point"
             f"{'' if question.points == 1 else 's'}) {question.prompt}"]
    if question.kind == "choice":
        lines += [f"  {letter}) {opt['text']}"
                  for letter, opt in zip(_letters(8), question.data["options"])]
    elif question.kind == "numeric":
        lines.append(f"  (answer in {question.data['unit']})")
    elif question.kind == "predict":

        lines.append(make_variant(question, seed).text())
    elif question.kind == "code":

        lines.append(f"  write: {EXERCISES[question.data['exercise']].signature}")
    return "\n".join(lines)

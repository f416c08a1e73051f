"""Predict cells (``gml.predict``) and their reveal (``gml.reveal``): guess first, then measure.

    gml.predict("01.p1", "How much will memory_reserved() be after a 1-byte tensor?")  # a size
    gml.predict("05.p2", "Which run OOMs?", choices=["defaults", "max_split_size_mb:512"])
    gml.predict("02.p1", "How many segments?", kind="number")
    ...                                              # the experiment runs
    gml.reveal("01.p1", sim.memory_reserved())       # the simulator's number: right or not

The predict cell shows a text box (sizes take units: "2 GiB", "2048 MiB", "2097152") or a choice
in ipywidgets; headless (``GPUMEMLAB_HEADLESS``, nbval, CI, a plain Python shell) it prints the
question and moves on. ``gml.predict.answer(id, value)`` answers in code. A prediction is kept in
the progress file (``predictions``), so the reveal cell finds it even after a kernel restart.
The reveal cell runs whether or not there is a prediction, takes the right answer computed at run
time (never typed into the lesson; the first value a kernel measured for the question is kept, so
re-running the reveal after later cells moved the device on gives the same verdict), and says
whether the guess was right: a size typed as the lesson prints it (two decimals of its unit) is
right, other exact quantities are right or wrong, and a wrong guess hears by how much and, where a known misconception explains the
gap, the rule behind it (``predict_rules``; "5 GB" for 5 GiB is always named). The lessons register their questions, so a restarted
kernel still reads a prediction in the question's unit. An unreadable prediction gets one line
saying what was expected; nothing raises into the lesson.
"""
from __future__ import annotations

import os
import re

from .progress import Progress

from .predict_rules import (KINDS, QUESTIONS, Misconception, Reveal, Spec,  # noqa: F401
                            compare, show_value)


class PredictionError(ValueError):
    """A prediction that is not a number, a size or one of the choices."""


def parse_prediction(spec: Spec, value):
    """The learner's value as an int (size), float (number) or one of the choices."""
    from gpumemlab.units import parse_size

    if spec.kind == "choice":
        text = str(value).strip()
        for i, choice in enumerate(spec.choices):
            if text.lower() in (str(choice).lower(), "abcdefgh"[i]):
                return choice
        letters = ", ".join(f"{'abcdefgh'[i]}) {c}" for i, c in enumerate(spec.choices))
        raise PredictionError(f"expected one of {letters}; got {text!r}")
    if isinstance(value, bool):
        raise PredictionError(_expected(spec, value))
    if spec.kind == "size":
        try:
            return parse_size(value.strip() if isinstance(value, str) else value)
        except (TypeError, ValueError) as exc:
            if isinstance(value, float) and value >= 0:
                return round(value)
            if "whole number of bytes" in str(exc):   # "1.9 MiB": a guess, round it
                found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", value)
                try:
                    return round(float(found[1]) * parse_size(f"1{found[2]}"))
                except (TypeError, ValueError):
                    pass
            raise PredictionError(_expected(spec, value)) from None
    text = str(value).replace(",", "").replace("_", "").strip()
    if spec.unit and text.lower().endswith(spec.unit.lower()):   # "3 segments" for segments
        text = text[: -len(spec.unit)].strip()
    try:
        number = float(text.rstrip("%"))
    except ValueError:
        raise PredictionError(_expected(spec, value)) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise PredictionError(_expected(spec, value))
    return number


def _expected(spec: Spec, value) -> str:
    if spec.kind == "size":
        return (f"{spec.id} asks for a size: a number with its unit (KiB, MiB, GiB) or a number "
                f"of bytes; got {value!r}")
    unit = f" of {spec.unit}" if spec.unit else ""
    return f"{spec.id} asks for a number{unit} (digits, no size unit); got {value!r}"


# The answer format a predict cell shows. It is a placeholder, never a value: an example such as
# 'a', 3 or '2 GiB' would be the right answer of some question (or steer the guess), so nothing
# shown before a reveal may parse as an answer (tests/quizkit/test_predict_cells.py checks it).
_PLACEHOLDER = {"size": "<size>", "number": "<number>", "choice": "<letter>"}


def answer_example(spec: Spec) -> str:
    """The placeholder the predict cell shows in ``gml.predict.answer(id, ...)``."""
    return _PLACEHOLDER[spec.kind]


def answer_format(spec: Spec) -> str:
    """What to put in place of the placeholder, in words and without a value."""
    if spec.kind == "choice":
        return "<letter> one of " + ", ".join(repr("abcdefgh"[i]) for i in range(len(spec.choices)))
    if spec.kind == "size":
        return "<size> a number with its unit (KiB, MiB, GiB) or a byte count"
    unit = f" of {spec.unit}" if spec.unit else ""
    return f"<number> the number{unit} you expect"


class Predictions:
    """``gml.predict``: declare a prediction cell; ``gml.predict.answer`` / ``.reveal``."""

    def __init__(self, progress_path=None):
        self._progress_path = progress_path
        self._specs = {}
        self.revealed = {}      # id -> the answer revealed in this kernel (kept nowhere else)

    def progress(self) -> Progress:
        return Progress(self._progress_path)

    def __call__(self, prediction_id: str, question: str, *, kind: str = None, choices=None,
                 unit: str = ""):
        """Ask ``question``. ``kind`` is "size" (default), "number" or "choice" (implied by
        ``choices``). Shows the widget at once (so two predictions in one cell both show), or
        prints the question headless; returns None."""
        spec = self._declare(prediction_id, question, kind, choices, unit)
        from .core import _widgets_available

        if os.environ.get("GPUMEMLAB_HEADLESS") or not _widgets_available():
            print(self.text(spec.id))
            return None
        from IPython.display import display
        from .predict_view import PredictView

        display(PredictView(self, spec))
        return None

    def _declare(self, prediction_id, question, kind, choices, unit) -> Spec:
        if not isinstance(prediction_id, str) or "." not in prediction_id:
            raise ValueError(f"prediction ids look like '01.p1', got {prediction_id!r}")
        kind = kind or ("choice" if choices else "size")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if kind == "choice" and not choices:
            raise ValueError("a choice prediction needs choices=[...]")
        known = QUESTIONS.get(prediction_id)
        rules = {} if known is None or known.kind != kind else {
            "tolerance": known.tolerance, "tolerance_why": known.tolerance_why,
            "misconceptions": known.misconceptions}
        spec = Spec(prediction_id, str(question), kind, tuple(choices or ()), unit, **rules)
        self._specs[spec.id] = spec
        return spec

    def spec(self, prediction_id: str, actual=None) -> Spec:
        """The question declared in this kernel, else the lessons' registered question (so a
        restarted kernel keeps its unit), else one read from the progress file or ``actual``."""
        if prediction_id in self._specs:
            return self._specs[prediction_id]
        if prediction_id in QUESTIONS:
            return QUESTIONS[prediction_id]
        entry = self.progress().prediction(prediction_id) or {}
        kind = entry.get("kind") or ("choice" if isinstance(actual, str) else "number")
        return Spec(prediction_id, entry.get("question", ""), kind, tuple(entry.get("choices", ())),
                    entry.get("unit", ""))

    def text(self, prediction_id: str) -> str:
        spec = self.spec(prediction_id)
        lines = [f"Predict {spec.id}: {spec.question}"]
        if spec.kind == "choice":
            lines += [f"  {'abcdefgh'[i]}) {c}" for i, c in enumerate(spec.choices)]
        entry = self.progress().prediction(spec.id)
        if entry and entry.get("value") is not None:
            lines.append(f"Your prediction: {show_value(spec, entry['value'])}.")
        else:
            lines.append(f"(Answer in code: gml.predict.answer({spec.id!r}, "
                         f"{answer_example(spec)!r}), {answer_format(spec)}; "
                         f"the reveal below runs either way.)")
        return "\n".join(lines)

    def record(self, prediction_id: str, value) -> str:
        """Store ``value`` as the prediction; return the one-line feedback (never raises for a
        bad value: the line says what was expected, and the earlier prediction is kept)."""
        if not isinstance(prediction_id, str):
            return f"? prediction ids look like '01.p1'; got {prediction_id!r}"
        if not (prediction_id in self._specs or prediction_id in QUESTIONS
                or self.progress().prediction(prediction_id)):
            return (f"? no question {prediction_id!r} was asked: run its predict cell first "
                    f"(ids look like '01.p1')")
        spec = self.spec(prediction_id)
        try:
            parsed = parse_prediction(spec, value)
        except PredictionError as exc:
            return f"? {exc}"
        if isinstance(parsed, float) and parsed.is_integer():
            parsed = int(parsed)
        progress = self.progress()
        attempts = (progress.prediction(spec.id) or {}).get("attempts", 0) + 1
        progress.record_prediction(spec.id, value=parsed, text=str(value), kind=spec.kind,
                                   question=spec.question, choices=list(spec.choices),
                                   unit=spec.unit, attempts=attempts)
        return f"Saved: you predict {show_value(spec, parsed)}. Run on; the reveal will compare."

    def answer(self, prediction_id: str, value) -> None:
        """Predict in code (the widget's text box does the same)."""
        print(self.record(prediction_id, value))

    def judge(self, prediction_id: str, actual) -> Reveal:
        """Compare the stored prediction with ``actual`` and record the outcome."""
        spec = self.spec(prediction_id, actual)
        if spec.kind == "size" and not isinstance(actual, int):
            actual = int(actual)
        # The answer is what this cell's experiment measured the first time it ran in this
        # kernel: re-running the reveal after later cells changed the device (Run All, then a
        # prediction, then this cell again) must not measure their state instead.
        actual = self.revealed.setdefault(spec.id, actual)
        progress = self.progress()
        entry = progress.prediction(spec.id) or {}
        result = compare(spec, entry.get("value"), actual)
        if entry.get("value") is not None:
            progress.record_prediction(spec.id, actual=actual, verdict=result.verdict)
        return result

    def reveal(self, prediction_id: str, actual) -> None:
        """Print the measured answer and whether the prediction was right (and why not)."""
        print(self.judge(prediction_id, actual).text)

    def reset(self, notebook=None) -> None:
        """Forget the predictions (and this kernel's measured answers) of ``notebook``, or all."""
        prefix = "" if notebook is None else f"{str(notebook).zfill(2)}."
        self.progress().reset(prefix, tables=("predictions",))
        for key in [k for k in self.revealed if k.startswith(prefix)]:
            del self.revealed[key]

    def __repr__(self):
        return ("gml.predict: gml.predict('01.p1', 'question') asks, "
                "gml.reveal('01.p1', measured) compares")


__all__ = ["Predictions", "Spec", "Reveal", "PredictionError", "compare", "parse_prediction"]

"""What a predict cell's answer is judged by: the question's ``Spec`` (its kind, unit, choices, the
tolerance a measured quantity allows and the misconceptions it checks for), the registry of the
lessons' questions, and ``compare``, which words the verdict.

The lessons register their questions here (``question(...)`` in ``gpumemlab.lessons``' modules),
so a prediction typed after a kernel restart, before the predict cell ran again, is still read
in the question's unit, and the reveal still shows it in that unit.

Exact quantities (sizes the allocator rounds to the byte, counts of calls or segments) are right
or wrong: a guess 1.6 % under is wrong, and the reveal says by how much and, when the gap is the
one a known misconception produces, the rule that accounts for it. Only a question that declares
a ``tolerance`` (a measured, noisy quantity, or one shown rounded) accepts a guess near the answer.
"""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("size", "number", "choice")


@dataclass(frozen=True)
class Misconception:
    """A wrong answer a learner is known to give, and the rule that accounts for the gap.
    ``wrong`` is a choice (for choice questions) or a function of the right answer that returns
    the value the misconception leads to (e.g. ``lambda actual: actual - K_SMALL_BUFFER``).
    ``rule`` is its words, or a function of no arguments that computes them when shown, for a
    rule that quotes the simulator's figures (so they are measured, never typed in)."""
    wrong: object
    rule: object

    def said(self) -> str:
        """The rule's words (computed now, if ``rule`` is a function)."""
        return self.rule() if callable(self.rule) else self.rule

    def matches(self, predicted, actual, alike=None) -> bool:
        """Whether ``predicted`` is this wrong answer; ``alike(a, b)``, where given, also counts
        a size typed as the lesson prints it ("20.4 GiB" for a request of 20.40 GiB)."""
        try:
            expected = self.wrong(actual) if callable(self.wrong) else self.wrong
        except (TypeError, ValueError, ArithmeticError):
            return False
        if isinstance(expected, str) or isinstance(predicted, str):
            return str(expected).lower() == str(predicted).lower()
        return expected == predicted or bool(alike and alike(expected, predicted))


@dataclass(frozen=True)
class Spec:
    id: str
    question: str
    kind: str = "size"
    choices: tuple = ()
    unit: str = ""              # a word after numbers ("segments"), for kind "number"
    tolerance: float = 0.0      # accepted distance, in the answer's own unit; 0: exact
    tolerance_why: str = ""     # why this quantity has one (measured, shown rounded)
    misconceptions: tuple = ()  # Misconception, ...


@dataclass(frozen=True)
class Reveal:
    """How a prediction compares with the measured answer (``verdict``: exact, within, off,
    right, wrong or none)."""
    id: str
    actual: object
    predicted: object
    verdict: str
    text: str
    ratio: float = None     # predicted / actual, for numbers
    rule: str = ""          # the misconception's rule the guess matched, if any

    def __str__(self):
        return self.text


QUESTIONS = {}   # id -> Spec: the lessons' questions, registered when gpumemlab.lessons loads


def question(question_id, kind="size", *, unit="", choices=(), tolerance=0.0, tolerance_why="",
             misconceptions=()):
    """Register the lessons' question ``question_id`` (its words stay in the lesson's cell)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if tolerance and not tolerance_why:
        raise ValueError(f"{question_id}: a tolerance needs its reason (measured, rounded)")
    QUESTIONS[question_id] = Spec(question_id, "", kind, tuple(choices), unit, float(tolerance),
                                  tolerance_why, tuple(misconceptions))
    return QUESTIONS[question_id]


def show_value(spec: Spec, value) -> str:
    from gpumemlab.units import format_size

    if value is None:
        return "nothing"
    if spec.kind == "size":
        return format_size(int(value))
    if spec.kind == "number":
        shown = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3g}"
        return shown + (f" {spec.unit}" if spec.unit else "")
    return str(value)


def decimal_units_rule(predicted, actual) -> str:
    """The rule when ``predicted`` is the answer's number read in decimal units: "5 GB" typed
    for 5 GiB parses as 5 * 10**9 bytes (4.66 GiB), as PyTorch's and the kit's parsers read it."""
    from gpumemlab.units import format_size

    for power, (dec, binary) in enumerate((("KB", "KiB"), ("MB", "MiB"), ("GB", "GiB"),
                                            ("TB", "TiB")), start=1):
        number = predicted / 1000 ** power
        if number >= 1 and abs(number * 1024 ** power - actual) <= 0.005 * 1024 ** power:
            return (f"That is the answer's number in {dec} ({10 ** (3 * power):,} bytes each), "
                    f"not {binary} ({1 << (10 * power):,} bytes): {number:g} {dec} is "
                    f"{format_size(int(predicted))}. The allocator counts in {binary}; type "
                    f"'{number:g} {binary}'.")
    return ""


NEAR_BARE = 0.10   # a bare number within 10 % of the answer once read in its shown unit


def bare_bytes_rule(predicted, actual) -> str:
    """The rule when ``predicted`` is a bare number that the size parser read as bytes ("32"
    is 32 bytes, as ``parse_size`` and PyTorch read an int) but that is the answer, or near it,
    in the unit the answer is shown in: "32" typed for 32.00 MiB."""
    from gpumemlab.units import format_size, parse_size

    shown_unit = format_size(int(actual)).split()[-1]
    if shown_unit == "bytes" or not predicted > 0:
        return ""
    factor = parse_size(f"1{shown_unit}")
    if predicted >= factor:
        return ""
    meant = predicted * factor
    off = abs(meant - actual) / actual
    if off > NEAR_BARE:
        return ""
    right = format_size(round(meant)) == format_size(int(actual))
    number = f"{predicted:g}"
    return (f"{number} was read as bytes; did you mean {number} {shown_unit}? A number with no "
            f"unit is a byte count, as in gpu.empty(n); {number} {shown_unit} would be "
            + ("right." if right else f"{100 * off:.1f} % off.")
            + f" Type the unit: '{number} {shown_unit}'.")


def _matched(spec: Spec, predicted, actual) -> str:
    alike = (lambda a, b: show_value(spec, a) == show_value(spec, b)) if spec.kind == "size" \
        else None
    rule = next((m.said() for m in spec.misconceptions if m.matches(predicted, actual, alike)), "")
    if not rule and spec.kind == "size" and predicted and actual:
        rule = decimal_units_rule(predicted, actual) or bare_bytes_rule(predicted, actual)
    return rule


def shown_alike(spec: Spec, predicted, actual) -> bool:
    """Whether ``predicted`` is ``actual`` at the precision the lesson prints it (a size to two
    decimals of its unit, as ``format_size`` shows it): typing the printed value is right."""
    return spec.kind == "size" and show_value(spec, predicted) == show_value(spec, actual)


def compare(spec: Spec, predicted, actual) -> Reveal:
    """Word how ``predicted`` compares with ``actual`` (no printing, no state)."""
    shown = show_value(spec, actual)
    if predicted is None:
        return Reveal(spec.id, actual, None, "none",
                      f"{spec.id}: the answer is {shown}. (No prediction recorded: predict in the "
                      f"cell above, or gml.predict.answer({spec.id!r}, ...), then re-run this.)")
    guess = show_value(spec, predicted)
    rule = _matched(spec, predicted, actual)
    because = f" {rule}" if rule else ""
    if spec.kind == "choice":
        right = str(predicted) == str(actual)
        return Reveal(spec.id, actual, predicted, "right" if right else "wrong",
                      f"{spec.id}: you predicted {guess}; the answer is {shown}: "
                      f"{'right.' if right else 'not this time.' + because}", rule=rule)
    gap = predicted - actual
    ratio = predicted / actual if actual else None
    if gap == 0:
        verdict, how = "exact", "exactly right."
    elif shown_alike(spec, predicted, actual):
        verdict, how = "within", (f"right, at the precision the lesson prints ({shown}; the "
                                  f"exact answer is {int(actual):,} bytes).")
    elif abs(gap) <= spec.tolerance:
        verdict, how = "within", (f"right, within {show_value(spec, spec.tolerance)} "
                                  f"({spec.tolerance_why}).")
    else:
        verdict = "off"
        side = "too high" if gap > 0 else "too low"
        how = f"off by {show_value(spec, abs(gap))} ({side}"
        if ratio and ratio > 0 and max(ratio, 1 / ratio) >= 2:
            how += f", a factor of {max(ratio, 1 / ratio):.2f}"
        elif actual:
            how += f", {100 * abs(gap) / abs(actual):.2f} %"
        how += ")." + because
    return Reveal(spec.id, actual, predicted, verdict,
                  f"{spec.id}: you predicted {guess}; the simulator gives {shown}: {how}",
                  ratio, rule)


__all__ = ["Spec", "Reveal", "Misconception", "QUESTIONS", "question", "compare", "show_value",
           "KINDS", "decimal_units_rule", "bare_bytes_rule", "shown_alike"]

"""Item statistics of a class: which question was too hard, which did not separate the students
who understood from those who did not. Pure computation on (student, item, score, max_score,
answer) responses; reading files is ``reading``'s job, showing them ``view``'s.

For each item (a question, or a whole assignment):

* **difficulty**: the share right, the mean over students of score / max_score (1 = everyone
  got full marks). Undefined for an item worth no points.
* **discrimination**: the corrected item-total correlation, the Pearson correlation between the
  item's score and the *rest* score (the student's total minus this item). For an item scored
  0 or full marks it is the point-biserial correlation. The item is left out of the total so that
  it is not correlated with itself. Undefined (``None``, with the reason) when the item or the
  rest score is the same for every student, or there are fewer than two students.
* **common wrong answers**: the three answers most often given by students who did not get full
  marks, with their counts (only questions whose answers were recorded: plain answers).

A student with no row for an item scored 0 on it: a missing answer earns nothing, as in the
grades. Warnings flag an item everyone got right (it tells nothing about who understood), one
no one got (the question, its key or the teaching needs a look), and one with a negative or weak
discrimination (stronger students did worse, or no better, on it).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

WEAK = 0.2          # a common rule of thumb: below it an item barely separates students
TOP_WRONG = 3
FEW_STUDENTS = 10   # below it, every figure moves a lot with one student


@dataclass(frozen=True)
class Response:
    student: str
    item: object          # a question or assignment name (a str once read whole)
    score: float
    max_score: float
    answer: str = ""


@dataclass
class ItemStat:
    item: str
    n: int                        # students counted (those with no row scored 0)
    missing: int                  # of them, students with no row for this item
    max_score: float
    mean_score: float
    difficulty: float | None      # share right, 0..1; None when worth no points
    discrimination: float | None  # corrected item-total correlation; None when undefined
    undefined_why: str = ""       # why discrimination is None
    wrong_answers: list = field(default_factory=list)   # [(answer, count)], most common first
    warnings: list = field(default_factory=list)


@dataclass
class ClassStats:
    items: list                   # [ItemStat] in the order the items first appear
    n_students: int
    notes: list = field(default_factory=list)


def pearson(xs, ys):
    """Pearson's r of two equal-length sequences, or None when it is undefined (fewer than two
    pairs, or either side without variance)."""
    xs, ys = list(xs), list(ys)
    if len(xs) != len(ys):
        raise ValueError("pearson needs two sequences of the same length")
    if len(xs) < 2 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    mx, my = math.fsum(xs) / len(xs), math.fsum(ys) / len(ys)
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    if sxx <= 0 or syy <= 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def _undefined_why(n, item_scores, rest) -> str:
    if n < 2:
        return "fewer than 2 students"
    if len(set(item_scores)) < 2:
        return "every student scored the same on it"
    if len(set(rest)) < 2:
        return "the rest of the score is the same for every student"
    return ""


def _warnings(st: ItemStat, scores) -> list:
    out = []
    if st.max_score <= 0:
        out.append("worth no points: its share right is undefined")
    elif all(s >= st.max_score for s in scores):
        out.append("everyone got it right: it cannot tell who understood")
    elif all(s <= 0 for s in scores):
        out.append("no one got it: check the question, its key and what was taught")
    r = st.discrimination
    if r is None:
        out.append(f"discrimination undefined: {st.undefined_why}")
    elif r < 0:
        out.append(f"negative discrimination (r = {r:.2f}): students who did better on the "
                   f"rest did worse here; check the key and the wording")
    elif r < WEAK:
        out.append(f"weak discrimination (r = {r:.2f} < {WEAK:.2f}): it barely separates "
                   f"students who did well on the rest from those who did not")
    return out


def item_stats(responses, students=None) -> ClassStats:
    """Statistics of every item over ``students`` (default: every student with a response)."""
    responses = list(responses)
    students = list(dict.fromkeys(students if students is not None
                                  else (r.student for r in responses)))
    items = list(dict.fromkeys(r.item for r in responses))
    by = {(r.student, r.item): r for r in responses}
    maxes = {}
    for r in responses:
        maxes.setdefault(r.item, r.max_score)
    score = {(s, i): by[s, i].score if (s, i) in by else 0.0 for s in students for i in items}
    out = []
    for i in items:
        xs = [score[s, i] for s in students]
        # rounded so that sums equal on paper (0.1 + 0.2 and 0.3) are equal here too
        rest = [round(math.fsum(score[s, j] for j in items if j != i), 9) for s in students]
        m = maxes[i]
        n = len(students)
        r = pearson(xs, rest)
        st = ItemStat(str(i), n, sum((s, i) not in by for s in students), m,
                      math.fsum(xs) / n if n else 0.0,
                      (math.fsum(x / m for x in xs) / n) if m > 0 and n else None, r,
                      _undefined_why(n, xs, rest) if r is None else "")
        wrong = Counter(by[s, i].answer for s in students
                        if (s, i) in by and by[s, i].score < m and by[s, i].answer)
        st.wrong_answers = sorted(wrong.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_WRONG]
        st.warnings = _warnings(st, xs)
        out.append(st)
    notes = []
    if len(students) < FEW_STUDENTS:
        notes.append(f"only {len(students)} student{'s' * (len(students) != 1)}: one student "
                     f"more or less moves every figure a lot")
    if len(items) == 1:
        notes.append("only one item: there is no rest score to correlate it with")
    return ClassStats(out, len(students), notes)

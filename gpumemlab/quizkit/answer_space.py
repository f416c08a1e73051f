"""How guessable a per-student variant question is: over many seeds, how often the commonest
answer is right (a blind guess) and how often two students' answers agree (a copied answer).

A variant is worth its name only when both stay at or under ``GUESS_BOUND``: a yes/no
question is right half the time blind, and a segment count of a short sequence takes a
handful of values, so a classmate's answer is often right too. ``gpumemlab assign`` warns
about such questions; the generators' own answer spaces are measured by the tests.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

GUESS_BOUND = 0.10   # right at most 1 time in 10, blind or copied
SEEDS = 1000


@dataclass(frozen=True)
class AnswerSpace:
    seeds: int
    distinct: int
    commonest: object
    blind: float      # share of seeds whose answer is the commonest one
    copied: float     # chance two random seeds share an answer (sum of squared shares)

    @property
    def guess_proof(self) -> bool:
        return self.blind <= GUESS_BOUND and self.copied <= GUESS_BOUND

    def line(self, qid: str) -> str:
        return (f"variant {qid}: a blind answer ({self.commonest!r}) is right "
                f"{100 * self.blind:.0f}% of the time and a classmate's {100 * self.copied:.0f}%"
                f" ({self.distinct} distinct answers over {self.seeds} seeds); above "
                f"{100 * GUESS_BOUND:.0f}% it does not tell students apart: weight it low, or "
                f"use a question whose answer is a size")


def answer_space(question, seeds: int = SEEDS) -> AnswerSpace:
    """Measure ``question``'s answers over ``seeds`` fixed seeds (the same every run)."""
    from .generators import make_variant

    answers = Counter(make_variant(question, f"answer-space-{i}").answer() for i in range(seeds))
    commonest, top = answers.most_common(1)[0]
    return AnswerSpace(seeds, len(answers), commonest, top / seeds,
                       sum((n / seeds) ** 2 for n in answers.values()))

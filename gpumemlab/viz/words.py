"""Counted nouns for the views' captions and lines: "1 segment", "3 segments". The views print
counts that are often one (a lesson's first tensor makes one segment, a pin one host block), and
"1 segments" reads as a slip."""
from __future__ import annotations


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (the views' nouns all take an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

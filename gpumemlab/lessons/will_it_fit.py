"""Lesson 14, will it fit: the planner (``gml.plan``) on a GPT-style model traced on fake tensors.
The lesson has no exercise of its own yet; this module registers its predict questions, so a
prediction typed after a kernel restart is still read in the question's unit.
"""
from __future__ import annotations

from gpumemlab.quizkit.predict_rules import question

question("14.p1", "size")
question("14.p2", "size")
question("14.p3", "number", unit="%")

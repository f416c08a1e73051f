"""Tests of gpumemlab.quizkit: quiz banks, checks, sealing, predict cells and static fallbacks."""

"""Tests of gpumemlab.classroom: assigning, grading, Gradescope, statistics, the sandbox and course links."""

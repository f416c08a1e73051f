"""Tests of the lesson notebooks in notebooks/: their files, and the lessons executed top to bottom."""

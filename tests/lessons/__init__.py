"""Tests of gpumemlab.lessons: exercises, the lesson 09 recording, gml.experiment and selftest."""

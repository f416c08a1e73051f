"""Tests of gpumemlab.recordings: capture, snapshot files, replay and real recordings."""

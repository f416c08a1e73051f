"""Tests of gpumemlab.viz: block maps, timelines, text views, players and fragmentation metrics."""

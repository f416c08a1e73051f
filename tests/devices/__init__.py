"""Tests of gpumemlab.devices: the simulated and real GPU facades, budgets and seeded scenarios."""

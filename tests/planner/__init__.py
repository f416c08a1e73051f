"""Tests of gpumemlab.planner: memory plans from fake CUDA runs."""

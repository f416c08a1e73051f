"""Tests that need a CUDA GPU (skipped without one) and the script recording real-GPU fixtures."""

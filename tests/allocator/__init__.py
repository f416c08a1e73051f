"""Tests of gpumemlab.allocator: the caching allocator's rules, pools, settings, frames and ports of PyTorch's own tests."""

"""Tests of gpumemlab.kvcache: paged KV-cache blocks, prefixes, sleep and startup budgets."""

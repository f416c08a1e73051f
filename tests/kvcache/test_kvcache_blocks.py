"""Block manager and KV sizing: free list, refcounts, copy-on-write plans, the paper's arithmetic."""
import random

import pytest

from gpumemlab.kvcache.block_table import BlockManager, NoFreeBlocksError
from gpumemlab.kvcache.sizing import PRESETS, kv_budget, kv_bytes_per_token


def test_append_takes_a_block_only_when_the_last_is_full():
    m = BlockManager(num_blocks=4, block_size=4)
    m.append("a", 3)
    assert m.num_used_blocks == 1
    m.append("a", 1)                      # fills slot 4 of block 0
    assert m.num_used_blocks == 1
    m.append("a", 1)                      # 5th token: a second block
    assert m.num_used_blocks == 2 and m.seq_len("a") == 5


def test_fork_shares_and_copy_on_write_copies_only_the_partial_last_block():
    m = BlockManager(num_blocks=8, block_size=4)
    m.append("p", 6)                      # blocks [x, y], y holds 2 tokens
    m.fork("p", "c")
    assert m.num_used_blocks == 2
    assert all(m.ref_count(b) == 2 for b in m.block_table("p"))
    plan = m.append("c", 1)
    assert plan.copy is not None and plan.copy[0] == m.block_table("p")[1]
    assert m.block_table("c")[0] == m.block_table("p")[0]       # full block still shared
    assert m.block_table("c")[1] != m.block_table("p")[1]
    assert m.ref_count(m.block_table("p")[1]) == 1
    m.check_invariants()


def test_fork_at_a_block_boundary_needs_no_copy():
    m = BlockManager(num_blocks=8, block_size=4)
    m.append("p", 8)
    m.fork("p", "c")
    plan = m.append("c", 1)
    assert plan.copy is None and m.num_used_blocks == 3


def test_free_returns_only_unshared_blocks():
    m = BlockManager(num_blocks=8, block_size=4)
    m.append("p", 8)
    m.fork("p", "c")
    m.append("c", 4)
    m.free("p")
    assert m.num_used_blocks == 3        # c still holds both shared blocks and its own
    m.free("c")
    assert m.num_free_blocks == 8
    m.check_invariants()


def test_full_pool_raises_and_changes_nothing():
    m = BlockManager(num_blocks=2, block_size=4)
    m.append("a", 6)
    m.fork("a", "b")
    with pytest.raises(NoFreeBlocksError, match="needs 2 free blocks"):
        m.append("b", 3)                  # CoW block + one new block, none free
    assert m.seq_len("b") == 6 and m.num_free_blocks == 0
    m.check_invariants()


def test_random_operations_keep_invariants():
    rng = random.Random(7)
    m = BlockManager(num_blocks=40, block_size=3)
    fresh = (f"s{i}" for i in range(10**6))
    for _ in range(600):
        op = rng.random()
        seqs = m.sequences
        try:
            if op < 0.5 or not seqs:
                m.append(rng.choice(seqs) if seqs and rng.random() < 0.8 else next(fresh),
                         rng.randint(0, 5))
            elif op < 0.75:
                m.fork(rng.choice(seqs), next(fresh))
            else:
                m.free(rng.choice(seqs))
        except NoFreeBlocksError:
            pass
        m.check_invariants()
        assert m.logical_blocks() >= m.num_used_blocks


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="block_size"):
        BlockManager(4, 0)
    with pytest.raises(TypeError, match="num_blocks"):
        BlockManager(4.0, 16)
    m = BlockManager(4, 4)
    with pytest.raises(KeyError, match="unknown sequence"):
        m.free("nope")
    m.append("a", 1)
    with pytest.raises(ValueError, match="already exists"):
        m.fork("a", "a")


def test_opt13b_keeps_800_kib_per_token_and_1_6_gb_per_request():
    opt = PRESETS["opt-13b"]
    assert opt.kv_bytes_per_token == 2 * 5120 * 40 * 2 == 800 * 1024
    assert opt.kv_bytes_per_max_request == 1600 * 1024 * 1024
    assert kv_bytes_per_token(32, 8, 128, "bf16") == 131072      # Llama-3-8B with GQA


def test_table1_kv_slots_for_13b_on_a100_40gb():
    """Table 1: 12 GB of KV memory holds 15.7K slots of OPT-13B; max-length reservations fit 7."""
    b = kv_budget("opt-13b", "40GiB", kv_memory="12GiB")
    assert round(b.max_tokens / 1000, 1) == 15.7
    assert b.max_requests_at_max_len == 7
    derived = kv_budget("OPT-13B", "40GB", gpu_memory_utilization=0.9)
    assert derived.kv_memory_bytes == int(40e9 * 0.9) - 26_000_000_000
    with pytest.raises(ValueError, match="do not fit"):
        kv_budget("opt-175b", "80GB")
    with pytest.raises(ValueError, match="unknown model preset"):
        kv_budget("gpt-5", "80GB")


def test_importing_the_package_imports_no_torch_numpy_or_matplotlib():
    import subprocess
    import sys
    code = ("import sys, gpumemlab.kvcache as kv; kv.BlockManager; kv.kv_budget; "
            "print(sorted(m for m in ('torch', 'numpy', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

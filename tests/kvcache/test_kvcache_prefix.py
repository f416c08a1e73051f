"""Prefix caching: hit counts derived by hand, LRU eviction order, the radix tree, the CPU tier."""
import pytest

from gpumemlab.kvcache.prefix_cache import HashBlockPool, block_hashes
from gpumemlab.kvcache.prefix_sim import simulate_prefix
from gpumemlab.kvcache.prefix_workloads import PrefixRequest, PrefixWorkload, prefix_workload
from gpumemlab.kvcache.radix_cache import RadixCache

SYSTEM = tuple(range(1000, 1070))                 # a 70-token system prompt


def _hand_workload(n=10):
    # each request: the system prompt + 10 tokens of its own; 5 output tokens of its own
    return PrefixWorkload("hand", tuple(
        PrefixRequest(SYSTEM + tuple(range(10 * i, 10 * i + 10)),
                      tuple(range(5000 + 5 * i, 5005 + 5 * i))) for i in range(n)), 0)


def test_known_hit_counts_by_hand():
    w = _hand_workload()
    vllm = simulate_prefix(w, "vllm", num_blocks=100, block_size=16, max_running=1)
    # 70 shared tokens = 4 full blocks of 16 (64 tokens); the 5th block mixes in the user's
    # own tokens, so its hash differs. The first request finds nothing, the 9 others 4 blocks.
    assert vllm.hits_per_request == (0,) + (64,) * 9 and vllm.hit_tokens == 576
    assert vllm.prompt_tokens == 800 and vllm.hit_rate == 576 / 800
    # token granularity: the radix tree reuses all 70 shared tokens
    radix = simulate_prefix(w, "radix", num_blocks=100, block_size=16, max_running=1)
    assert radix.hits_per_request == (0,) + (70,) * 9 and radix.hit_tokens == 630
    assert simulate_prefix(w, "none", num_blocks=100, block_size=16).hit_tokens == 0
    # blocks of 8: 70 // 8 = 8 full shared blocks = 64 tokens; blocks of 5: all 70 (14 blocks)
    assert simulate_prefix(w, "vllm", num_blocks=200, block_size=8, max_running=1).hit_tokens == 9 * 64
    assert simulate_prefix(w, "vllm", num_blocks=300, block_size=5, max_running=1).hit_tokens == 9 * 70


def test_the_last_prompt_token_is_always_recomputed():
    pool = HashBlockPool(10, 4)
    prompt = tuple(range(8))
    blocks, hits, _, hashes = pool.admit(prompt, 9)
    pool.cache_prompt(blocks, hashes)
    pool.release(blocks, prompt + (99,))
    again = pool.admit(prompt, 9)
    assert again[1] == 1            # 2 full blocks cached, but only (8 - 1) // 4 = 1 may be reused
    pool.check_invariants()


def test_chained_hashes_depend_on_the_parent():
    a = block_hashes((1, 2, 3, 4, 5, 6, 7, 8), 4)
    b = block_hashes((9, 9, 9, 9, 5, 6, 7, 8), 4)
    assert len(a) == 2 and a[1] != b[1]          # same tokens, different parent
    assert block_hashes((1, 2, 3), 4) == []      # a partial block is never hashed


def test_lru_free_queue_evicts_the_oldest_and_a_requests_tail_first():
    pool = HashBlockPool(4, 2)
    r1 = tuple(range(4))                       # 2 blocks
    b1, *_ = pool.admit(r1, 4)
    pool.release(b1, r1)
    assert list(pool.free) == [2, 3, b1[1], b1[0]]      # freed in reverse: the tail goes first
    r2 = (50, 51, 52, 53, 54, 55)              # 3 blocks: takes 2, 3 and then r1's LAST block
    b2, hits, _, _ = pool.admit(r2, 6)
    assert hits == 0 and b2 == [2, 3, b1[1]] and pool.evictions == 1
    assert pool.admit(r1 + (7,), 5) is None             # 1 hit + 2 new blocks: only 1 is free
    pool.release(b2, r2)
    b3, hits, _, _ = pool.admit(r1 + (7,), 5)           # r1's first block is still cached
    assert hits == 1 and b3[0] == b1[0]
    pool.check_invariants()


def test_radix_tree_splits_locks_and_evicts_lru_leaves():
    cache = RadixCache(20)
    h1, hit = cache.admit((1, 2, 3, 4, 5, 6), 8)
    cache.cache_prompt(h1, (1, 2, 3, 4, 5, 6))
    cache.release(h1, (1, 2, 3, 4, 5, 6, 7, 8))
    h2, hit = cache.admit((1, 2, 3, 9, 9), 6)           # splits the edge after 1, 2, 3
    assert hit == 3 and cache.tree_tokens == 8
    cache.release(h2, (1, 2, 3, 9, 9, 9))
    assert cache.tree_tokens == 11 and cache.owned_tokens == 0
    cache.check_invariants()
    # the tree: (1 2 3) -> (4 5 6) -> (7 8), and (1 2 3) -> (9 9 9); (7 8) was used least recently
    assert cache.evict(1) == 2 and cache.tree_tokens == 9
    assert cache.evict(1) == 3 and cache.tree_tokens == 6   # (4 5 6) became a leaf in turn
    assert cache.evicted_tokens == 5
    cache.check_invariants()


def test_zero_hit_rate_costs_no_memory_or_time():
    w = prefix_workload("unique", 300, seed=1)
    on = simulate_prefix(w, "vllm", num_blocks=2048)
    off = simulate_prefix(w, "none", num_blocks=2048)
    assert on.hit_tokens == 0 and on.steps == off.steps and on.mean_running == off.mean_running
    assert on.hashed_blocks > 0 and off.hashed_blocks == 0


def test_workloads_are_seeded_and_share_what_they_say():
    a, b = prefix_workload("few-shot", 50, seed=3), prefix_workload("few-shot", 50, seed=3)
    assert a == b and a != prefix_workload("few-shot", 50, seed=4)
    chat = prefix_workload("multi-turn", 40, seed=0, turns=4)
    for i, r in enumerate(chat.requests):
        if r.after >= 0:
            prev = chat.requests[r.after]
            assert r.after < i and r.prompt[:prev.total] == prev.prompt + prev.output
    with pytest.raises(ValueError, match="unknown prefix workload"):
        prefix_workload("chat", 10)


def test_cpu_tier_adds_hits_counted_apart_with_their_transfer_time():
    w = prefix_workload("multi-turn", 400, seed=0)
    gpu_only = simulate_prefix(w, "vllm", num_blocks=1024)
    tiered = simulate_prefix(w, "vllm", num_blocks=1024, host_blocks=4096, host_bandwidth=1e9)
    assert tiered.hit_tokens == gpu_only.hit_tokens            # the GPU cache is unchanged
    assert tiered.host_hit_tokens > 0
    assert tiered.host_transfer_s == pytest.approx(tiered.host_hit_tokens / 16 * tiered.block_bytes / 1e9)
    assert tiered.prefill_tokens == gpu_only.prefill_tokens - tiered.host_hit_tokens
    # a slow link and a fast prefill: copying costs more than recomputing
    assert tiered.host_saving_s(prefill_tokens_per_s=1e9) < 0 < tiered.host_saving_s(1e3)
    with pytest.raises(ValueError, match="vllm policy only"):
        simulate_prefix(w, "radix", host_blocks=10)


def test_sweep_keeps_memory_constant_and_large_blocks_lose_hits():
    from gpumemlab.kvcache.prefix_figures import prefix_sweep, sweep_table
    rows = prefix_sweep(num_requests=120, kinds=("system-prompt",), block_sizes=(16, 256),
                        pool_tokens=(16_384,), pool_at=16_384)
    by = {(r.policy, r.block_size): r for r in rows}
    # a 1000-token system prompt: blocks of 16 reuse 992 tokens of it, blocks of 256 only 768
    assert by[("vllm", 16)].saved_tokens == 119 * 992
    assert by[("vllm", 256)].saved_tokens == 119 * 768
    assert by[("radix", 1)].saved_tokens == 119 * 1000
    assert "system-prompt" in sweep_table(rows)


def _release(cache, policy, handle, tokens):
    if policy == "radix":
        cache.release(handle, tokens)
    else:
        cache.release(handle[0], tokens, handle[1])
    cache.check_invariants()


@pytest.mark.parametrize("policy", ["vllm", "radix"])
def test_invariants_hold_through_a_crowded_chat(policy):
    w = prefix_workload("multi-turn", 80, seed=5, user_mean=20, output_mean=20)
    cache = RadixCache(600) if policy == "radix" else HashBlockPool(40, 8, host_blocks=10)
    running = []
    for r in w.requests:
        got = cache.admit(r.prompt, r.total)
        while got is None and running:                  # finish the oldest, then retry
            _release(cache, policy, *running.pop(0))
            got = cache.admit(r.prompt, r.total)
        if got is None:
            continue                                    # longer than the whole pool
        if policy == "radix":
            handle, _ = got
            cache.cache_prompt(handle, r.prompt)
            running.append((handle, r.prompt + r.output))
        else:
            blocks, _, _, hashes = got
            cache.cache_prompt(blocks, hashes)
            running.append(((blocks, hashes), r.prompt + r.output))
        cache.check_invariants()
    for handle, tokens in running:
        _release(cache, policy, handle, tokens)
    if policy == "radix":
        assert cache.owned_tokens == 0 and cache.locked_tokens == 0 and cache.evicted_tokens > 0
    else:
        assert len(cache.free) == cache.num_blocks and cache.evictions > 0 and cache.host_evictions > 0


def test_every_panel_of_the_prefix_figure_has_a_legend_naming_each_workload():
    # lesson 15's figure: the two lower panels once had lines of three colours and two styles
    # with no legend, read only by looking up at the panels above
    import matplotlib
    matplotlib.use("Agg")
    from gpumemlab.kvcache.prefix_figures import KINDS, prefix_figure, prefix_sweep
    rows = prefix_sweep(num_requests=40, block_sizes=(1, 16), pool_tokens=(4_096, 16_384),
                        pool_at=4_096)
    fig = prefix_figure(rows)
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None, ax.get_title()
        labels = [t.get_text() for t in legend.get_texts()]
        assert all(any(label.startswith(kind) for label in labels) for kind in KINDS), labels
        assert any("radix" in label for label in labels), labels

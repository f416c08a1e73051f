"""Serving simulator: workloads, known-answer accounting, strategy ordering, allocator-made fragmentation."""
import numpy as np
import pytest

from gpumemlab.kvcache import PRESETS, Workload, kv_budget, make_workload, sharegpt_like, simulate
from gpumemlab.kvcache.strategies import reserved_slots
from gpumemlab.units import MiB

BPT = PRESETS["opt-13b"].kv_bytes_per_token      # 819200 bytes


def _one(prompt, output):
    return Workload("one", np.array([prompt]), np.array([output]), np.array([0]), 2048, 0)


@pytest.fixture(scope="module")
def sharegpt():
    return sharegpt_like(400, seed=3)


@pytest.fixture(scope="module")
def runs(sharegpt):
    return {s: simulate(s, sharegpt, "12GiB") for s in ("static", "orca-max", "orca-pow2",
                                                         "orca-oracle", "paged")}


def test_workloads_are_seeded_and_match_the_papers_means():
    a, b = make_workload("sharegpt", 3000, seed=1), make_workload("sharegpt", 3000, seed=1)
    assert np.array_equal(a.prompt_lens, b.prompt_lens) and np.array_equal(a.output_lens, b.output_lens)
    assert not np.array_equal(a.prompt_lens, make_workload("sharegpt", 3000, seed=2).prompt_lens)
    assert abs(a.mean_prompt - 161.31) < 0.5 and abs(a.mean_output - 337.99) < 0.5
    al = make_workload("alpaca", 3000, seed=1)
    assert abs(al.mean_prompt - 19.31) < 0.5 and abs(al.mean_output - 58.45) < 0.5
    for w in (a, al):
        assert (w.prompt_lens >= 1).all() and (w.output_lens >= 1).all()
        assert (w.prompt_lens + w.output_lens).max() <= 2048
    # ShareGPT has the longer, more spread-out requests (the paper: 8.4x inputs, 5.8x outputs)
    assert a.output_lens.std() > 3 * al.output_lens.std()
    timed = make_workload("alpaca", 500, seed=0, request_rate=2.0)
    assert (np.diff(timed.arrival_steps) >= 0).all() and 200 < timed.arrival_steps[-1] < 300
    with pytest.raises(ValueError, match="unknown workload"):
        make_workload("wikitext", 10)
    with pytest.raises(ValueError, match="request_rate"):
        make_workload("alpaca", 10, request_rate=0)


def test_reservations():
    total = np.array([25, 32, 33, 2000, 7])
    assert reserved_slots("orca-pow2", total, 2048).tolist() == [32, 32, 64, 2048, 8]
    assert reserved_slots("orca-oracle", total, 2048).tolist() == total.tolist()
    assert reserved_slots("orca-max", total, 2048).tolist() == [2048] * 5


def test_paged_known_answer_one_request():
    """Prompt 4, output 4, blocks of 4, 4 blocks of memory. Admission takes ceil(5/4) = 2 blocks
    (prompt + first new token). Steps 0..3 hold 4, 5, 6, 7 tokens in 8 slots; it never needs a
    third block; its final length 8 fills its last block, so nothing is internal fragmentation."""
    r = simulate("paged", _one(4, 4), 16 * BPT, block_size=4)
    assert r.steps == 4 and r.preemptions == 0 and r.max_batch_size == 1
    assert r.shares["token_states"] == pytest.approx(5.5 / 16)
    assert r.shares["reserved"] == pytest.approx(2.5 / 16)
    assert r.shares["internal_fragmentation"] == 0
    assert r.shares["unused"] == pytest.approx(0.5)
    # final length 7 in blocks of 4: the last slot of block 2 is never used, from step 0 on
    r7 = simulate("paged", _one(4, 3), 16 * BPT, block_size=4)
    assert r7.shares["internal_fragmentation"] == pytest.approx(1 / 16)


def test_oracle_known_answer_one_request_through_the_caching_allocator():
    """8 slots x 800 KiB = 6.25 MiB, a multiple of 512 B, so the block is exactly that size; the
    caching allocator takes a 20 MiB segment for it (kLargeBuffer), so 20 MiB of KV memory is the
    least that works, and the rest of the segment is free (unused: nobody waits)."""
    total = 20 * MiB
    r = simulate("orca-oracle", _one(4, 4), total)
    assert r.steps == 4
    assert r.shares["token_states"] == pytest.approx(5.5 * BPT / total)
    assert r.shares["reserved"] == pytest.approx(2.5 * BPT / total)
    assert r.shares["unused"] == pytest.approx(1 - 8 * BPT / total)
    with pytest.raises(ValueError, match="cannot hold"):
        simulate("orca-max", _one(4, 4), total)


def test_shares_sum_to_one_and_every_token_is_generated(runs, sharegpt):
    for name, r in runs.items():
        assert sum(r.shares.values()) == pytest.approx(1.0), name
        assert min(r.shares.values()) >= 0, name
        assert r.tokens_per_step * r.steps == pytest.approx(int(sharegpt.output_lens.sum())), name


def test_strategy_ordering_matches_the_paper(runs):
    budget = kv_budget("opt-13b", "40GiB", kv_memory="12GiB")
    assert runs["orca-max"].mean_batch_size == budget.max_requests_at_max_len == 7
    tokens = [runs[s].token_states for s in ("static", "orca-max", "orca-pow2", "orca-oracle", "paged")]
    assert tokens == sorted(tokens)
    assert runs["paged"].token_states > 0.9
    assert runs["paged"].mean_batch_size > 1.8 * runs["orca-oracle"].mean_batch_size
    # only the allocator's own rounding: a cached block less than 1 MiB too big is not split
    assert runs["orca-oracle"].shares["internal_fragmentation"] < 1e-3
    assert runs["orca-max"].shares["internal_fragmentation"] > 0.4
    for s in ("static", "orca-max", "orca-pow2", "orca-oracle"):
        assert runs[s].preemptions == 0
    assert runs["paged"].preemptions > 0 and runs["paged"].recomputed_tokens > 0


def test_external_fragmentation_comes_from_the_allocator(sharegpt):
    """Variable-size buffers leave holes between live ones: the head request is refused while the
    total free memory would hold it. With expandable segments the allocator maps pages instead."""
    wl = sharegpt.head(250)
    default = simulate("orca-oracle", wl, "12GiB", keep_snapshot=True)
    expandable = simulate("orca-oracle", wl, "12GiB", alloc_conf="expandable_segments:True")
    assert default.shares["external_fragmentation"] > 0.05
    assert expandable.shares["external_fragmentation"] < default.shares["external_fragmentation"] / 2
    assert default.failed_allocations > 0
    assert default.snapshot is not None and "segments" in default.snapshot
    assert simulate("orca-max", wl, "12GiB").shares["external_fragmentation"] == 0  # equal sizes


def test_deterministic_and_bad_input(sharegpt):
    wl = sharegpt.head(100)
    a, b = simulate("orca-pow2", wl), simulate("orca-pow2", wl)
    assert a.shares == b.shares and a.steps == b.steps
    assert "Orca (Pow2)" in a.table() and "token states" in a.table()
    with pytest.raises(ValueError, match="unknown strategy"):
        simulate("buddy", wl)
    with pytest.raises(TypeError, match="Workload"):
        simulate("paged", [1, 2, 3])
    with pytest.raises(ValueError, match="block_size"):
        simulate("paged", wl, block_size=0)
    with pytest.raises(ValueError, match="cannot hold"):
        simulate("paged", wl, "100MiB")


def test_max_num_seqs_caps_the_batch(sharegpt):
    r = simulate("paged", sharegpt.head(100), "12GiB", max_num_seqs=5)
    assert r.max_batch_size == 5 and r.preemptions == 0

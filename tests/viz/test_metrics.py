"""Fragmentation metrics against snapshots whose figures are worked out by hand."""
import pytest

from gpumemlab.viz.metrics import DEFINITIONS, find_fit, fragmentation
from gpumemlab.viz.size_rules import Rules
from snapshot_builders import seg

MiB, GiB = 1 << 20, 1 << 30


def fragmented():
    """Four 2 GiB segments, each: 1.5 GiB live (requested 1.5 GiB - 300 B), 0.5 GiB free;
    plus one wholly free 1 GiB segment and a small segment with one 512 B block (1 requested).

    free = 4 x 0.5 GiB + 1 GiB + (2 MiB - 512) ; largest = 1 GiB
    non-releasable = the free parts of split segments = 2 GiB + (2 MiB - 512)
    """
    segs = [seg(k * 4 * GiB, [(3 * GiB // 2, 3 * GiB // 2 - 300, "active_allocated"),
                              (GiB // 2, 0, "inactive")]) for k in range(4)]
    segs.append(seg(32 * GiB, [(GiB, 7, "inactive")]))
    segs.append(seg(40 * GiB, [(512, 1, "active_allocated"), (2 * MiB - 512, 0, "inactive")],
                    pool="small"))
    return {"segments": segs, "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}


def test_hand_computed_figures():
    m = fragmentation(fragmented(), total_memory="12GiB")
    free = 2 * GiB + GiB + 2 * MiB - 512
    assert m["reserved_bytes"] == 9 * GiB + 2 * MiB
    assert m["allocated_bytes"] == 6 * GiB + 512
    assert m["requested_bytes"] == 6 * GiB - 1200 + 1
    assert m["reserved_unallocated_bytes"] == 3 * GiB + 2 * MiB - 512
    assert m["free_bytes"] == free and m["free_blocks"] == 6
    assert m["largest_free_block_bytes"] == GiB
    assert m["external_fragmentation"] == pytest.approx(1 - GiB / free)
    assert m["non_releasable_bytes"] == 2 * GiB + 2 * MiB - 512
    assert m["rounding_waste_bytes"] == 1200 + 511
    assert m["utilization"] == pytest.approx((6 * GiB + 512) / (9 * GiB + 2 * MiB))
    assert m["segments"] == 6
    # a cached 1 GiB block serves up to 1 GiB; after releasing the free 1 GiB segment the
    # device has 12 - 9 GiB - 2 MiB + 1 GiB free, whose whole 2 MiB pages can be cudaMalloc'd
    assert m["largest_request_now_bytes"] == GiB
    assert m["largest_request_bytes"] == 4 * GiB - 2 * MiB


def test_pending_and_streams():
    snap = {"segments": [seg(0, [(4 * MiB, 4 * MiB, "active_pending_free"),
                                 (16 * MiB, 0, "inactive")], stream=5)]}
    m = fragmentation(snap)
    assert m["pending_free_bytes"] == 4 * MiB and m["allocated_bytes"] == 0
    assert m["requested_bytes"] == 4 * MiB
    assert m["largest_request_now_bytes"] == 0  # the free block is on stream 5, not 0
    assert fragmentation(snap, stream=5)["largest_request_now_bytes"] == 16 * MiB
    assert m["largest_request_bytes"] is None
    assert any("total_memory" in note for note in m.notes)


def test_empty_snapshot():
    m = fragmentation({"segments": []}, total_memory=GiB)
    assert m["reserved_bytes"] == 0 and m["utilization"] == 0.0
    assert m["external_fragmentation"] == 0.0
    assert m["largest_request_bytes"] == GiB


def test_renders_as_text_and_html_with_definitions():
    m = fragmentation(fragmented(), total_memory=12 * GiB)
    text, html = str(m), m._repr_html_()
    for name, (_, definition) in DEFINITIONS.items():
        assert name in text and definition in text
        assert f"<code>{name}</code>" in html
    assert "1024.00 MiB" in text and "%" in text  # c10 prints exactly 1 GiB in MiB
    assert m.as_dict()["segments"] == 6 and len(m) == len(DEFINITIONS)
    with pytest.raises(KeyError, match="no metric"):
        m["fragmentation"]


def test_rounding_rules_follow_c10():
    r = Rules()
    assert [r.round_size(n) for n in (1, 512, 513, 1048577)] == [512, 512, 1024, 1049088]
    four = Rules.from_settings({"roundup_power2_divisions": {str(1 << i): 4 for i in range(16)}})
    assert four.round_size(1048577) == 1310720 and four.round_size(1200) == 1536
    assert four.round_size(5_000_000) == 5242880
    assert Rules(divisions=(2,) * 16).round_size(2049) == 3072
    assert [r.allocation_size(n) for n in (512, 1048576, 1049088, 10485760, 10486272)] == \
        [2 * MiB, 2 * MiB, 20 * MiB, 10 * MiB, 12 * MiB]
    assert not r.should_split("large", 20 * MiB, 19 * MiB)  # 1 MiB rest is not > 1 MiB
    assert r.should_split("large", 20 * MiB, 19 * MiB - 512)
    assert r.should_split("small", 2 * MiB, 2 * MiB - 512)


def test_find_fit_is_best_fit_in_the_right_pool():
    snap = fragmented()
    fit = find_fit(snap["segments"], 400 * MiB, Rules())
    assert (fit["segment"], fit["block_bytes"], fit["take_bytes"]) == (0, GiB // 2, 400 * MiB)
    assert fit["offset_bytes"] == 3 * GiB // 2
    fit = find_fit(snap["segments"], 600 * MiB, Rules())
    assert (fit["segment"], fit["block_bytes"]) == (4, GiB)
    assert find_fit(snap["segments"], 2 * GiB, Rules()) is None
    small = find_fit(snap["segments"], 1000, Rules())
    assert small["pool"] == "small" and small["segment"] == 5 and small["take_bytes"] == 1024


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="snapshot"):
        fragmentation(3.5)
    with pytest.raises(ValueError, match="segments"):
        fragmentation({"device_traces": []})
    with pytest.raises(ValueError, match="segment 0: missing 'blocks'"):
        fragmentation({"segments": [{"address": 0}]})
    with pytest.raises(ValueError, match="segment 0, block 0: missing 'state'"):
        fragmentation({"segments": [{"address": 0, "blocks": [{"size": 512}]}]})
    bad = fragmented()
    bad["segments"][0]["total_size"] += 512
    with pytest.raises(ValueError, match="add up"):
        fragmentation(bad)
    with pytest.raises(ValueError):
        fragmentation(fragmented(), total_memory="12 parsecs")


def test_on_the_simulator_fragmentation_scenario():
    """Four 2 GiB segments each end up [1.5 GiB free][~0.5 GiB live][2 MiB free]: 6 GiB is
    free, no 2 GiB tensor fits, and the 9 GiB device has only 1 GiB left for a new segment."""
    import gpumemlab as gml
    gpu = gml.SimulatedGPU("9GiB")
    for a in [gpu.empty(2 * GiB) for _ in range(4)]:
        a.free()
    fillers = [gpu.empty(3 * GiB // 2) for _ in range(4)]  # best fit: offset 0 of each segment
    keep = [gpu.empty(GiB // 2 - 2 * MiB) for _ in range(4)]  # one per segment, 2 MiB left
    del fillers
    m = fragmentation(gpu)
    assert m["reserved_bytes"] == gpu.memory_reserved() == 8 * GiB
    assert m["allocated_bytes"] == gpu.memory_allocated()
    assert m["free_bytes"] == gpu.memory_reserved() - gpu.memory_allocated()
    assert m["non_releasable_bytes"] == gpu.memory_stats()["inactive_split_bytes.all.current"]
    assert m["largest_free_block_bytes"] == 3 * GiB // 2 < 2 * GiB <= m["free_bytes"]
    assert m["largest_request_bytes"] == 3 * GiB // 2
    with pytest.raises(gml.OutOfMemoryError):
        gpu.empty(m["largest_request_bytes"] + 512)
    gpu.empty(m["largest_request_bytes"])  # the largest request we promised does succeed
    assert len(keep) == 4


def test_promised_largest_requests_hold_on_random_simulator_states():
    """Property: after random allocs and frees, a request of ``largest_request_now_bytes``
    succeeds without reserving more, ``largest_request_bytes`` succeeds, and 2 MiB more fails."""
    from hypothesis import given, settings, strategies as st
    import gpumemlab as gml

    sizes = st.sampled_from([700, 300_000, 3 * MiB, 30 * MiB, 300 * MiB, 900 * MiB])
    ops = st.lists(st.tuples(st.booleans(), sizes, st.integers(0, 50)), min_size=1, max_size=30)

    @settings(max_examples=30, deadline=None)
    @given(ops)
    def check(plan):
        def fresh_state():
            gpu = gml.SimulatedGPU("3GiB", record_history=False)
            live = []
            for do_free, size, pick in plan:
                if do_free and live:
                    live.pop(pick % len(live)).free()
                else:
                    try:
                        live.append(gpu.empty(size))
                    except gml.OutOfMemoryError:
                        pass
            return gpu, live
        gpu, live = fresh_state()
        m = fragmentation(gpu)
        assert m["allocated_bytes"] + m["pending_free_bytes"] + m["free_bytes"] == \
            m["reserved_bytes"]
        assert 0.0 <= m["external_fragmentation"] < 1.0
        now = m["largest_request_now_bytes"]
        assert now <= m["largest_free_block_bytes"]
        if now:
            reserved = gpu.memory_reserved()
            gpu.empty(now).free()
            assert gpu.memory_reserved() == reserved
        gpu.empty(m["largest_request_bytes"]).free()
        gpu, live = fresh_state()
        with pytest.raises(gml.OutOfMemoryError):
            gpu.empty(m["largest_request_bytes"] + 2 * MiB)
    check()

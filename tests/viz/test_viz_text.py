"""Text views: the ASCII block map's characters and the pseudo-Python trace's lines."""
import pytest

import gpumemlab as gml
from snapshot_builders import seg

MiB, GiB = 1 << 20, 1 << 30


def test_blockmap_one_character_per_page():
    snap = {"segments": [
        # 20 MiB = 10 pages of 2 MiB: 4 allocated, 1 half allocated, 1 pending, 4 free
        seg(0, [(9 * MiB, 9 * MiB, "active_allocated"), (MiB, 0, "inactive"),
                (2 * MiB, 2 * MiB, "active_pending_free"), (8 * MiB, 0, "inactive")]),
        seg(GiB, [(512, 1, "active_allocated"), (2 * MiB - 512, 0, "inactive")], "small"),
    ]}
    text = gml.text_blockmap(snap)
    lines = text.splitlines()
    assert lines[0] == "large pool: 1 segment, one character = 2.00 MiB"
    assert "[####5~....]" in lines[1] and lines[1].startswith("seg   0")
    assert "9.00 MiB allocated, 9.00 MiB free (largest 8.00 MiB)" in lines[1]
    assert lines[2] == "small pool: 1 segment, one character = 64.00 KiB"
    assert "[1" + "." * 31 + "]" in lines[3] and lines[3].startswith("seg   1")
    assert "external fragmentation" in lines[4] and lines[5].startswith("legend:")


def test_blockmap_pages_grow_for_huge_segments_and_errors():
    snap = {"segments": [seg(0, [(8 * GiB, 8 * GiB, "active_allocated")])]}
    text = gml.text_blockmap(snap, width=32)
    assert "one character = 256.00 MiB" in text and "[" + "#" * 32 + "]" in text
    assert "[" + "#" * 4096 + "]" in gml.text_blockmap(snap, page_bytes=2 * MiB)
    with pytest.raises(ValueError, match="width"):
        gml.text_blockmap(snap, width=2)
    with pytest.raises(ValueError, match="page_bytes"):
        gml.text_blockmap(snap, page_bytes=0)


def test_trace_reads_like_python():
    gpu = gml.SimulatedGPU("4GiB")
    a = gpu.empty(3 * MiB)
    b = gpu.empty(1000)
    a.free()
    gpu.empty_cache()
    try:
        gpu.empty(8 * GiB)
    except gml.OutOfMemoryError:
        pass
    b.free()
    lines = gml.text_trace(gpu).splitlines()
    assert lines == [
        "seg_0 = cudaMalloc(20.00 MiB)",
        "a = seg_0[0:3.00 MiB]",
        "seg_1 = cudaMalloc(2.00 MiB)",
        "b = seg_1[0:1000 bytes]",
        "del a",
        "cudaFree(seg_0)  # 20.00 MiB",
        "raise OutOfMemoryError  # tried 8.00 GiB, 4.00 GiB free on the device",
        "del b",
    ]
    assert gml.text_trace(gpu, limit=2).splitlines()[-1].startswith("# ... ")


def test_trace_of_a_deferred_free_and_a_block_from_before_the_trace():
    snap = {"segments": [seg(0, [(2 * MiB, 0, "inactive")], "small")], "device_traces": [[
        {"action": "free_requested", "addr": 0, "size": 700, "stream": 0},
        {"action": "alloc", "addr": 1024, "size": 1000, "stream": 0},
        {"action": "free_completed", "addr": 0, "size": 700, "stream": 0},
        {"action": "free_requested", "addr": 1024, "size": 1000, "stream": 0},
        {"action": "free_completed", "addr": 1024, "size": 1000, "stream": 0},
    ]]}
    assert gml.text_trace(snap).splitlines() == [
        "del a  # pending until other streams finish; a = seg_0[...], allocated before the trace",
        "b = seg_0[1024 bytes:1000 bytes]",
        "# a returned to the cache (streams done)",
        "del b",
    ]


def _many_segments(n=1185):
    """A real-sized recording: hundreds of equal weight segments, some with free tails."""
    from snapshot_builders import seg
    MiB = 1 << 20
    segs, addr = [], 1 << 40
    for k in range(n):
        size = (24, 24, 40, 64)[k % 4] * MiB
        if k % 9 == 0:
            blocks = [(size - 2 * MiB, size - 2 * MiB, "active_allocated"), (2 * MiB, 0, "inactive")]
        else:
            blocks = [(size, size, "active_allocated")]
        segs.append(seg(addr, blocks))
        addr += size
    return {"segments": segs, "device_traces": []}


def test_a_thousand_segments_stay_readable():
    import gpumemlab as gml
    snap = _many_segments()
    text = gml.text_blockmap(snap)
    lines = text.splitlines()
    assert len(lines) < 60                                   # not 1,229 lines
    assert "1185 segments" in text and "equal segments" in text
    shown = sum(int(l.rsplit(" x", 1)[1].split()[0]) if " equal segments" in l else 1
                for l in lines if l.startswith("seg "))
    left = int(lines[-3].split("...")[1].split()[0]) if "not drawn" in lines[-3] else 0
    assert shown + left == 1185                              # every segment counted once
    assert gml.text_blockmap(snap, max_rows=2000).count("\nseg ") == 1185


def test_a_count_of_one_takes_the_singular():
    """One segment with one free block reads "1 segment" and "in 1 block"; the host line "in 1
    block". Before: "1 segments", "in 1 blocks"."""
    from gpumemlab.viz.host_view import host_line
    from gpumemlab.viz.words import count

    text = gml.text_blockmap({"segments": [seg(0, [(2 * MiB, 2 * MiB, "active_allocated"),
                                                   (18 * MiB, 0, "inactive")])]})
    assert "\n1 segment: reserved 20.00 MiB" in text and "free 18.00 MiB in 1 block (" in text
    two = gml.text_blockmap({"segments": [seg(0, [(20 * MiB, 0, "inactive")]),
                                          seg(GiB, [(20 * MiB, 0, "inactive")])]})
    assert "\n2 segments: reserved 40.00 MiB" in two and "in 2 blocks (" in two
    line = host_line({"pinned_bytes": 8 * MiB, "blocks": 1, "requested_bytes": 6 * MiB,
                      "rounding_waste_bytes": 2 * MiB, "awaiting_event_bytes": 0,
                      "cached_free_bytes": 0, "trace_entries": 2})
    assert line.startswith("pinned host memory: 8.00 MiB in 1 block (requested")
    assert [count(n, "page") for n in (0, 1, 2)] == ["0 pages", "1 page", "2 pages"]

"""The page map of expandable segments and the trace's naming of them: one expandable segment is
one name in text_trace (offsets from its reserved range), and page_map shows the pages a
release unmapped, before and after, on one scale."""
from __future__ import annotations

import pytest

import gpumemlab as gml

GiB, MiB = gml.GiB, gml.MiB


@pytest.fixture
def unmapped_card():
    card = gml.SimulatedGPU("8GiB", alloc_conf="expandable_segments:True")
    warm = card.empty(7 * GiB)
    del warm
    blocks = [card.empty(GiB) for _ in range(7)]
    for i in (0, 2, 4, 6):
        blocks[i] = None
    x = card.empty(2 * GiB)
    return card, blocks, x


def test_one_expandable_segment_is_one_name_in_the_trace(unmapped_card):
    card = unmapped_card[0]
    assert len(card.memory_snapshot()) == 3          # three mapped runs in the snapshot
    text = gml.text_trace(card)
    assert "seg_1" not in text and text.count("seg_0 = reserve_virtual_range()") == 1
    assert "seg_0.unmap(0:1020.00 MiB)" in text      # the first hole, minus its edge page
    assert "i = seg_0[6.00 GiB:2.00 GiB]" in text    # the 2 GiB tensor, at its virtual offset


def test_page_map_before_and_after_the_unmap(unmapped_card):
    card = unmapped_card[0]
    actions = [e["action"] for e in card.snapshot()["device_traces"][0]]
    k = actions.index("segment_unmap")
    last_unmap = max(i for i, a in enumerate(actions) if a == "segment_unmap")
    fig = gml.page_map(card, [k - 1, last_unmap, len(actions) - 1],
                       labels=["before", "unmapped", "after"])
    before, unmapped_row, after = fig.gml_pages
    assert before["page_bytes"] == after["page_bytes"] == 20 * MiB
    assert len(before["mapped"]) == len(after["mapped"])
    flipped = [i for i, (b, a) in enumerate(zip(before["mapped"], unmapped_row["mapped"]))
               if b and not a]
    assert len(flipped) * 20 * MiB == sum(e["size"] for e in card.snapshot()["device_traces"][0]
                                          if e["action"] == "segment_unmap")
    assert not any(unmapped_row["used"][i] for i in flipped)
    assert sum(after["mapped"]) * 20 * MiB == card.memory_reserved()
    with pytest.raises(ValueError, match="no expandable segment"):
        gml.page_map(gml.SimulatedGPU("1GiB", alloc_conf=""))

"""The block map is checked by what it draws: rectangles, colours and labels against the snapshot."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402

import gpumemlab as gml  # noqa: E402
from snapshot_builders import seg  # noqa: E402
from gpumemlab.viz.blockmap import plan_panels  # noqa: E402
from gpumemlab.viz.palette import BLOCK_STYLE  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


def snapshot():
    return {"segments": [
        seg(0, [(512 * MiB, 500 * MiB, "active_allocated"), (256 * MiB, 0, "inactive"),
                (256 * MiB, 256 * MiB, "active_pending_free")]),
        seg(4 * GiB, [(2 * GiB, 2 * GiB, "active_allocated")], expandable=True),
        seg(8 * GiB, [(512, 100, "active_allocated"), (2 * MiB - 512, 0, "inactive")],
            pool="small"),
    ], "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                              "expandable_segments": True, "max_split_size": -1}}


def collections(fig):
    out = {}
    for ax in fig.axes:
        for coll in ax.collections:
            out.setdefault(coll.get_gid(), []).append((ax, coll))
    return out


def rects(coll):
    """(x0, x1, row) of every rectangle in a PolyCollection, in axis units."""
    out = []
    for path in coll.get_paths():
        v = path.vertices
        out.append((v[:, 0].min(), v[:, 0].max(), (v[:, 1].min() + v[:, 1].max()) / 2))
    return np.array(sorted(out))


def test_panels_keep_pools_apart_and_scales_readable():
    panels = plan_panels(snapshot()["segments"])
    # 1 GiB and 2 GiB share a scale (within 8x); the 2 MiB small-pool segment is apart
    assert [p["rows"] for p in panels] == [[0, 1], [2]]
    assert [p["max_bytes"] for p in panels] == [2 * GiB, 2 * MiB]


def test_blocks_are_drawn_to_scale_in_state_colours():
    fig = gml.show(snapshot())
    colls = collections(fig)
    large_ax = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("large pool"))
    requested = [c for ax, c in colls["blocks:requested"] if ax is large_ax][0]
    # seg 0 (row 0): 500 MiB requested of a 512 MiB block; seg 1 (row 1): 2 GiB, axis in GiB
    assert np.allclose(rects(requested), [(0, 500 / 1024, 0), (0, 2, 1)])
    rounding = [c for ax, c in colls["blocks:rounding"] if ax is large_ax][0]
    assert np.allclose(rects(rounding), [(500 / 1024, 0.5, 0)])
    free = [c for ax, c in colls["blocks:free"] if ax is large_ax][0]
    assert np.allclose(rects(free), [(0.5, 0.75, 0)])
    pending = [c for ax, c in colls["blocks:pending"] if ax is large_ax][0]
    assert np.allclose(rects(pending), [(0.75, 1.0, 0)])
    for name, (colour, _) in BLOCK_STYLE.items():
        for _, coll in colls[f"blocks:{name}"]:
            assert np.allclose(coll.get_facecolor()[0], to_rgba(colour))
    # the expandable segment is outlined apart; the plain ones too
    assert len(colls["segments:expandable"][0][1].get_paths()) == 1
    assert large_ax.get_xlabel() == "offset within segment (GiB)"
    labels = [t.get_text() for t in large_ax.get_yticklabels()]
    assert labels == ["seg 0  1024.00 MiB", "seg 1  2.00 GiB"]


def test_small_pool_panel_and_tiny_blocks_stay_visible():
    fig = gml.show(snapshot())
    small_ax = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("small pool"))
    assert small_ax.get_xlabel() == "offset within segment (MiB)"
    (x0, x1, row), = rects(next(c for c in small_ax.collections
                                if c.get_gid() == "blocks:requested"))
    assert x0 == 0 and x1 >= 2 / 200  # 100 B is widened to a visible hair


def test_a_one_byte_tensor_is_drawn_over_the_free_block_beside_it():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    a = gpu.empty(1)
    ax = gml.show(gpu).axes[0]
    gids = [c.get_gid() for c in ax.collections]
    assert gids.index("blocks:requested") > gids.index("blocks:free")
    (x0, x1, row), = rects(ax.collections[gids.index("blocks:requested")])
    assert x0 == 0 and x1 >= 2 / 200 and a.size == 512   # a 512 B block in a 2 MiB band


def test_title_legend_and_footer_name_device_settings_and_figures():
    gpu = gml.SimulatedGPU("8GiB")
    x = gpu.empty(3 * GiB)
    fig = gml.show(gpu)
    assert x.size == 3 * GiB
    title = fig._suptitle.get_text()
    assert "Simulated GPU" in title and "8.00 GiB" in title
    assert "PYTORCH_CUDA_ALLOC_CONF=''" in title and "expandable_segments=False" in title
    legend = fig.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    # only what is drawn: one live 3 GiB block, no rounding, nothing pending or free
    assert texts == [BLOCK_STYLE["requested"][1]]
    assert "reserved 3.00 GiB" in title
    assert "rounding waste 0 bytes" in legend.get_title().get_text()


def test_largest_free_block_and_request_fit_are_marked():
    fig = gml.show(snapshot(), request=200 * MiB)
    info = fig.gml_blockmap
    assert info["largest"] == {"size_bytes": 256 * MiB, "segment": 0, "offset_bytes": 512 * MiB}
    assert info["fit"]["segment"] == 0 and info["fit"]["take_bytes"] == 200 * MiB
    patches = {p.get_gid(): p for ax in fig.axes for p in ax.patches}
    assert patches["request"].get_x() == pytest.approx(0.5)
    assert patches["request"].get_width() == pytest.approx(200 / 1024)
    assert patches["largest"].get_width() == pytest.approx(0.25)
    assert "fits: best-fit cached block of 256.00 MiB at seg 0" in info["request_text"]


def test_legend_lists_only_what_is_drawn():
    fig = gml.show(snapshot(), request=300 * MiB)   # nothing fits: no hatched block to name
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert [label for _, label in BLOCK_STYLE.values()] == texts[:4]
    assert not any(t.startswith("where the") for t in texts)
    assert fig.gml_blockmap["drawn"] >= {"blocks:requested", "blocks:rounding", "blocks:pending",
                                         "blocks:free", "segments:expandable", "largest"}


def test_request_that_fits_nowhere_says_why():
    snap = dict(snapshot(), allocator_settings={"PYTORCH_CUDA_ALLOC_CONF": ""})
    fig = gml.show(snap, request=300 * MiB)
    assert "request" not in {p.get_gid() for ax in fig.axes for p in ax.patches}
    text = fig.gml_blockmap["request_text"]
    assert "fits no cached free block" in text and "largest block is 256.00 MiB" in text
    assert "cudaMalloc a new 300.00 MiB segment" in text


def test_into_given_axes_and_other_inputs():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    out = gml.show(snapshot()["segments"], ax=ax, title="mine")
    assert out is fig and ax.get_title().startswith("mine")
    assert [t.get_text() for t in ax.get_yticklabels()][-1].startswith("seg 2")

    class Result:
        snapshot = snapshot()
    assert gml.show(Result()).gml_blockmap["largest"]["segment"] == 0
    with pytest.raises(TypeError, match="snapshot"):
        gml.show(12)
    with pytest.raises(ValueError, match="request"):
        gml.show(snapshot(), request=-1)
    plt.close("all")


def test_many_segments_use_size_panels_and_no_per_block_patches():
    segs = [seg(i * GiB, [(20 * MiB, 20 * MiB, "active_allocated")]) for i in range(60)]
    segs += [seg(100 * GiB, [(4 * GiB, 0, "inactive")])]
    fig = gml.show({"segments": segs})
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles == ["large pool: 1 segment of 4.00 GiB (own scale)",
                      "large pool: 60 segments of 20.00 MiB (own scale)"]
    assert fig.axes[1].get_yticks().size == 0  # too many bands to name each
    assert sum(len(ax.patches) for ax in fig.axes) == 1  # only the largest-free outline
    assert len(rects(collections(fig)["blocks:requested"][0][1])) == 60


def test_dense_maps_merge_paths_but_keep_every_byte():
    # 120 segments x 60 blocks: alternating allocated (with 100 B rounding) and free, plus runs
    # of allocated neighbours; 7,200 blocks is above the 5,000 that switches to merging
    segs = []
    for i in range(120):
        blocks = []
        for j in range(60):
            state = "inactive" if j % 3 == 2 else "active_allocated"
            blocks.append((MiB, MiB - 100 if state != "inactive" else 0, state))
        segs.append(seg(i * GiB, blocks))
    fig = gml.show({"segments": segs})
    ax = fig.axes[0]
    drawn = {c.get_gid(): c for c in ax.collections}
    widths = {gid: rects(c)[:, 1].sum() - rects(c)[:, 0].sum() for gid, c in drawn.items()
              if gid.startswith("blocks:")}
    unit = MiB  # 60 MiB segments: the axis is in MiB
    assert widths["blocks:requested"] + widths.get("blocks:rounding", 0) == \
        pytest.approx(120 * 40 * MiB / unit)
    assert widths["blocks:free"] == pytest.approx(120 * 20 * MiB / unit)
    assert len(drawn["blocks:requested"].get_paths()) == 120 * 20  # pairs of neighbours merged
    assert "block_edges" not in drawn


def test_request_verdict_under_expandable_segments_speaks_of_pages():
    snap = snapshot()  # its settings say expandable_segments=True
    text = gml.show(snap, request=300 * MiB).gml_blockmap["request_text"]
    assert "expandable segment would map up to 300.00 MiB of new 20.00 MiB pages" in text


def test_a_raw_dict_is_normalised_before_it_is_drawn():
    """gml.show reads through the same entry as replay: a dict in an older layout (no totals,
    no block addresses, the docstring's 'active_awaiting_free') draws like its normalised form."""
    from gpumemlab.recordings.files import normalize_snapshot
    raw = {"segments": [{"address": 1 << 32, "blocks": [
        {"size": 2 * 2**20, "state": "active_awaiting_free"},
        {"size": 18 * 2**20, "state": "inactive"}]}]}
    normalised, _notes = normalize_snapshot(raw)
    drawn, expected = gml.show(raw), gml.show(normalised)
    assert drawn.gml_blockmap == expected.gml_blockmap
    assert drawn.texts[0].get_text() == expected.texts[0].get_text()
    assert "reserved 20.00 MiB, allocated 0 bytes in 1 segment" in drawn.texts[0].get_text()
    assert gml.text_blockmap(raw) == gml.text_blockmap(normalised)
    assert "address" not in raw["segments"][0]["blocks"][0]      # the input is left alone


def test_a_thousand_segments_draw_as_readable_rows():
    import matplotlib.pyplot as plt
    from .test_viz_text import _many_segments
    snap = _many_segments()
    fig = gml.show(snap)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert 0 < len(labels) <= 40 and all(" x" in label for label in labels)
    assert sum(int(label.rsplit("x", 1)[1]) for label in labels) <= 1185
    text = " ".join(t.get_text() for t in fig.texts) + fig.legends[0].get_title().get_text()
    assert "1185 segments" in text and "equal segments drawn once" in text
    assert sum(int(label.rsplit("x", 1)[1]) for label in labels) == 1185 or \
        "more segments not drawn" in text
    plt.close("all")

"""Block maps coloured by who made each block: gml.show(source, by="frame" | "size")."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import gpumemlab as gml  # noqa: E402

MiB = 1 << 20


def load_weights(gpu):
    return [gpu.empty(30 * MiB) for _ in range(2)]


def activations(gpu):
    return [gpu.empty(3 * MiB) for _ in range(3)]


def test_allocated_blocks_take_their_allocating_functions_colour():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    kept = load_weights(gpu) + activations(gpu)
    fig = gml.show(gpu, by="frame")
    keys = fig.gml_blockmap["keys"]
    assert keys["by"] == "frame" and keys["note"] == ""
    names = keys["ranked"]
    assert len(names) == 2 and names[0].startswith("load_weights (test_viz_blockmap_keys.py:")
    assert names[1].startswith("activations (test_viz_blockmap_keys.py:")  # fewer bytes: second
    # one coloured polygon per allocated block, each in its function's colour
    colls = [c for ax in fig.axes for c in ax.collections if c.get_gid() == "blocks:keyed"]
    faces = [tuple(f) for c in colls for f in c.get_facecolors()]
    assert len(faces) == len(kept)
    assert sorted(faces) == sorted([tuple(keys["colours"][names[0]])] * 2 +
                                   [tuple(keys["colours"][names[1]])] * 3)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[:2] == [f"allocated by {names[0]}", f"allocated by {names[1]}"]
    assert "allocated: bytes requested" not in labels       # not drawn when keyed


def test_without_frames_or_categories_blocks_are_coloured_by_size_and_it_says_so():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="", record_frames=False)
    kept = [gpu.empty(n * MiB) for n in (1, 3, 30)]
    for by in ("frame", "category"):
        fig = gml.show(gpu, by=by)
        keys = fig.gml_blockmap["keys"]
        assert keys["by"] == "size" and "coloured by size" in keys["note"]
        assert set(keys["ranked"]) == {"up to 1 MiB (small pool)", "1 to 10 MiB", "10 to 100 MiB"}
        assert any("coloured by size" in t.get_text() for t in fig.legends[0].texts +
                   [fig.legends[0].get_title()])
    del kept


def test_a_bad_key_is_one_clear_error():
    with pytest.raises(ValueError, match="by must be one of frame, category, size"):
        gml.show(gml.SimulatedGPU("1GiB"), by="colour")

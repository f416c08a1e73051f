"""The per-allocation timeline (gml.timeline(..., by=...)): bands stack, shift down when a block
below them is freed, start at the left edge when alive before the recording, and are coloured
by frame, category or size, with step marks from user_metadata."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import gpumemlab as gml  # noqa: E402
from gpumemlab.viz.active_timeline import bands  # noqa: E402

MiB = 1 << 20


def three_then_free_first():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    a = gpu.empty(3 * MiB)
    b = gpu.empty(5 * MiB)
    c = gpu.empty(7 * MiB)
    a.free()
    return gpu, (b, c)


def test_bands_stack_and_shift_down_when_a_lower_one_is_freed():
    gpu, _keep = three_then_free_first()
    data = bands(gpu, by="size")
    # the timeline's events are the trace's, less its "snapshot" markers (the last entry here)
    events = [e for e in gpu.snapshot()["device_traces"][0] if e["action"] != "snapshot"]
    allocs = [i for i, e in enumerate(events) if e["action"] == "alloc"]
    freed = [i for i, e in enumerate(events) if e["action"] == "free_completed"]
    by_size = {b["size"]: b for b in data["bands"]}
    a, b, c = by_size[3 * MiB], by_size[5 * MiB], by_size[7 * MiB]
    assert (a["start"], a["end"]) == (allocs[0], freed[0])
    assert a["offsets"] == [(allocs[0], 0)]
    assert b["offsets"] == [(allocs[1], 3 * MiB), (freed[0], 0)]
    assert c["offsets"] == [(allocs[2], 8 * MiB), (freed[0], 5 * MiB)]
    assert b["end"] == c["end"] == len(events)       # alive at the end
    assert data["peak_allocated"] == 15 * MiB
    assert {x["key"] for x in data["bands"]} == {"1 to 10 MiB"}


def test_allocations_alive_before_the_recording_start_at_the_left_edge():
    gpu, _keep = three_then_free_first()
    snap = gpu.snapshot()
    trace = snap["device_traces"][0]
    first_free = next(i for i, e in enumerate(trace) if e["action"] == "free_requested")
    snap["device_traces"][0] = trace[first_free:]      # recording began after the allocations
    data = bands(snap, by="size")
    assert sorted((x["start"], x["size"]) for x in data["bands"]) == \
        [(-1, 3 * MiB), (-1, 5 * MiB), (-1, 7 * MiB)]
    survivors = [x for x in data["bands"] if x["size"] != 3 * MiB]
    assert all(x["offsets"][0][0] == -1 and len(x["offsets"]) == 2 for x in survivors)


def test_frames_categories_and_step_marks_from_a_capture():
    torch = pytest.importorskip("torch")
    from torch import nn

    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.Adam(model.parameters())
    with gml.capture(model, opt) as cap:
        for i in range(2):
            cap.set_memory_metadata(f"step {i}")
            loss = model(torch.randn(32, 64)).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
    fig = gml.timeline(cap, by="category")
    data = fig.gml_timeline
    assert data["by"] == "category" and data["note"] == ""
    assert {"parameter", "gradient", "optimizer_state"} <= set(data["colours"])
    assert [m[1] for m in data["marks"]] == ["step 0", "step 1"] and data["step_note"] == ""
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "reserved" not in labels        # a CPU capture has no segments: nothing drawn
    by_frame = gml.timeline(cap, by="frame").gml_timeline
    assert any("test_viz_active_timeline.py" in k for k in by_frame["colours"])


def test_no_frames_falls_back_to_size_and_says_how_to_mark_steps():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="", record_frames=False)
    xs = [gpu.empty(n * MiB) for n in (1, 2, 30)]
    fig = gml.timeline(gpu, by="frame")
    data = fig.gml_timeline
    assert data["by"] == "size" and "no stack frames" in data["note"]
    assert data["marks"] == [] and "_set_memory_metadata" in data["step_note"]
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "no stack frames" in texts and "_set_memory_metadata" in texts
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "reserved" in labels             # a simulated card reserved segments
    del xs


def test_bad_key():
    with pytest.raises(ValueError, match="by must be one of frame, category, size"):
        gml.timeline(gml.SimulatedGPU("1GiB"), by="colour")


def test_a_comprehension_is_named_after_the_function_that_holds_it():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")

    def make_state(card):
        return [card.empty(n * MiB) for n in (1, 2)] + list(card.empty(n * MiB) for n in (3,))

    _keep = make_state(gpu)
    keys = {b["key"].split(" (")[0] for b in bands(gpu, by="frame")["bands"]}
    assert keys == {"make_state"}


def _cell_frames(line):
    return [{"filename": "/tmp/ipykernel_4242/1234567.py", "name": "forward", "line": line}]


def test_code_typed_in_a_cell_is_named_by_its_line_of_the_cell(monkeypatch):
    # the legend once read "forward (cell:14)", which looks like a cell number; line 14 is meant
    import sys
    import types
    from gpumemlab.viz.active_timeline import _frame_key
    monkeypatch.delitem(sys.modules, "IPython", raising=False)     # a script: no kernel to ask
    assert _frame_key(_cell_frames(14)) == "forward (line 14 of a notebook cell)"

    class Compiler:                                   # IPython's, as its tracebacks use it
        def format_code_name(self, name):
            return ("Cell", "In[5]") if name == "/tmp/ipykernel_4242/1234567.py" else None
    shell = types.SimpleNamespace(compile=Compiler())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert _frame_key(_cell_frames(14)) == "forward (line 14 of cell In[5])"
    other = [{"filename": "/tmp/ipykernel_4242/999.py", "name": "f", "line": 3}]
    assert _frame_key(other) == "f (line 3 of a notebook cell)"      # a cell run elsewhere
    assert _frame_key([{"filename": "/w/train.py", "name": "step", "line": 7}]) == "step (train.py:7)"

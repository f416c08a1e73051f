"""The timeline plots the per-event totals the trace implies, with peaks, releases and OOMs."""
import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import gpumemlab as gml  # noqa: E402
from gpumemlab.viz.history import History  # noqa: E402

GiB, MiB = 1 << 30, 1 << 20


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


def oom_run(conf=""):
    """Three 1.5 GiB tensors on a 5 GiB device, the middle one freed, then a 2.5 GiB request."""
    gpu = gml.SimulatedGPU("5GiB", alloc_conf=conf)
    a, b, c = (gpu.empty(3 * GiB // 2) for _ in range(3))
    b.free()
    gpu.empty_cache()
    try:
        gpu.empty(5 * GiB // 2)
    except gml.OutOfMemoryError:
        pass
    return gpu, (a, c)


def lines(fig):
    return {line.get_gid(): line for ax in fig.axes for line in ax.lines}


def test_curves_are_the_history_totals():
    gpu, keep = oom_run()
    h = History(gpu)  # each gpu.snapshot() adds a 'snapshot' entry, so read the trace once
    fig = gml.timeline(h)
    drawn = lines(fig)
    for name in ("allocated_bytes", "reserved_bytes", "requested_bytes"):
        assert np.allclose(drawn[name].get_ydata(), np.array(h.totals[name]) / GiB)
    assert fig.axes[0].get_ylabel() == "memory (GiB)"
    peak = drawn["peak:reserved_bytes"]
    assert peak.get_ydata()[0] == pytest.approx(4.5)
    assert "peak 4.50 GiB" in drawn["reserved_bytes"].get_label()
    oom = drawn["oom"]
    assert list(oom.get_xdata()) == [i for i, e in enumerate(h.events) if e["action"] == "oom"]
    release = [i for i, e in enumerate(h.events) if e["action"] == "segment_free"]
    assert release and drawn["release"].get_xdata()[0] == release[0]
    assert drawn["capacity"].get_ydata()[0] == pytest.approx(5.0)


def test_compare_runs_on_one_axis():
    plain, _k1 = oom_run()
    es, _k2 = oom_run("expandable_segments:True")
    fig = gml.timeline([plain, es], labels=["default", "expandable"])
    drawn = lines(fig)
    assert {"reserved:0", "reserved:1", "allocated:0", "allocated:1"} <= set(drawn)
    assert drawn["reserved:0"].get_label().startswith("default: reserved (peak")
    data = fig.gml_timeline
    assert [d["label"] for d in data] == ["default", "expandable"]
    assert max(data[0]["reserved_bytes"]) == 4.5 * GiB
    with pytest.raises(ValueError, match="labels"):
        gml.timeline([plain, es], labels=["one"])


def test_replay_result_like_objects_and_rows():
    class Result:
        label = "what-if"
        timeline = [{"event": i, "action": a, "allocated_bytes": v, "reserved_bytes": 2 * v,
                     "requested_bytes": v} for i, (a, v) in
                    enumerate([("alloc", MiB), ("alloc", 3 * MiB), ("oom", 3 * MiB)])]
        snapshot = {"segments": []}
    fig = gml.timeline(Result())
    drawn = lines(fig)
    assert np.allclose(drawn["reserved_bytes"].get_ydata(), [2, 6, 6])
    assert list(drawn["oom"].get_xdata()) == [2]
    fig = gml.timeline(Result.timeline, cursor=1)
    assert lines(fig)["cursor"].get_xdata()[0] == 1
    with pytest.raises(ValueError, match="timeline row"):
        gml.timeline([{"event": 0, "reserved_bytes": 1}])


def test_replay_results_with_array_timelines_compare():
    """gml.replay returns a Timeline of parallel arrays and an ``oom`` dict with the index."""
    class Arrays:
        allocated, reserved, requested = [MiB, 2 * MiB], [20 * MiB, 20 * MiB], [MiB, 2 * MiB]

    class Result:
        alloc_conf = ""
        total_memory = 64 * MiB
        timeline = Arrays()
        oom = {"index": 2, "size": 60 * MiB}

    class Other(Result):
        alloc_conf = "expandable_segments:True"
        oom = None
    fig = gml.timeline([Result(), Other()])
    data = fig.gml_timeline
    assert [d["label"] for d in data] == ["default settings", "expandable_segments:True"]
    assert data[0]["event"] == [0, 1, 2] and data[0]["action"][-1] == "oom"
    assert data[1]["reserved_bytes"] == [20 * MiB, 20 * MiB]
    drawn = lines(fig)
    assert list(drawn["oom"].get_xdata()) == [2]
    # 64 MiB is ten times the curves' peak: named in the legend, the axis stays on the data
    assert "capacity" not in drawn and "capacity_off_scale" not in drawn   # no phantom legend line
    notes = [t for ax in fig.axes for t in ax.texts if t.get_gid() == "capacity_off_scale"]
    assert notes and notes[0].get_text().startswith("device capacity 64.00 MiB: far above")
    assert all(ax.get_ylim()[1] < 25 for ax in fig.axes)   # MiB: the 20 MiB peak fills it


def test_compared_runs_get_a_panel_each_with_shared_axes():
    plain, _k1 = oom_run()
    es, _k2 = oom_run("expandable_segments:True")
    fig = gml.timeline([plain, es], labels=["default", "expandable"])
    assert len(fig.axes) == 2
    assert fig.axes[0].get_ylim() == fig.axes[1].get_ylim()
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["default", "expandable"]
    assert {line.get_gid() for line in fig.axes[0].lines} >= {"reserved:0", "allocated:0"}
    assert {line.get_gid() for line in fig.axes[1].lines} >= {"reserved:1", "allocated:1"}


def test_real_replay_results():
    gpu, _keep = oom_run()
    results = [gml.replay(gpu.snapshot(), total_memory="5GiB"),
               gml.replay(gpu.snapshot(), alloc_conf="expandable_segments:True",
                          total_memory="5GiB")]
    fig = gml.timeline(results)
    data = fig.gml_timeline
    assert len(data[0]["reserved_bytes"]) >= len(results[0].timeline)
    assert max(data[1]["reserved_bytes"]) == results[1].peak_reserved


def test_compared_runs_marked_in_steps_share_an_x_axis_in_steps():
    from gpumemlab.viz.memory_timeline import phases
    """Runs of different lengths side by side: each step spans one unit of x in every panel."""
    def run(empty_each_step):
        gpu = gml.SimulatedGPU("4GiB", alloc_conf="")
        for step in range(5):
            gpu.set_memory_metadata(f"step {step}")
            x = gpu.empty(300 * MiB)
            del x
            if empty_each_step:
                gpu.empty_cache()
        return gpu
    kept, emptied = run(False), run(True)
    fig = gml.timeline([kept, emptied], labels=["kept", "emptied"])
    data = fig.gml_timeline
    assert len(data[0]["entry"]) != len(data[1]["entry"])        # different trace lengths ...
    assert [d["x_unit"] for d in data] == ["step", "step"]        # ... on one axis in steps
    for d in data:
        starts = [d["event"][a] for a, _, _ in phases(d)]
        assert starts == [0, 1, 2, 3, 4]
    marks = [ln for ax in fig.axes for ln in ax.lines if ln.get_gid() == "step_mark"]
    assert len(marks) == 10 and fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    assert fig.axes[1].get_xlabel().startswith("step")

"""gml.growth on real torch loops captured on the CPU: each case's cause and evidence, with the
known answers derived from what the case does (tensor sizes, what autograd saved, Adam's state),
its fixed version, iteration marks, snapshot sources and bad input."""
import gc
import inspect

import pytest

torch = pytest.importorskip("torch")

import gpumemlab as gml  # noqa: E402
from gpumemlab.lessons import growth_cases as cases  # noqa: E402
from gpumemlab.doctor.growth import GrowthError, iteration_spans  # noqa: E402

B = 512                 # the cases' default batch
OUT_BYTES = B * 256 * 4          # one output of the perceptron (float32)
HIDDEN_BYTES = B * 1024 * 4      # one hidden activation


def _saved_bytes(fn, exclude=()):
    """Bytes of the distinct storages autograd saves while ``fn`` runs, but for those of the
    tensors in ``exclude`` (parameters, inputs made before): torch's own saved_tensors_hooks
    say what the graph keeps."""
    seen = {}
    skip = {t.untyped_storage().data_ptr() for t in exclude}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def _no_leak(report):
    assert not {"leak", "one-time state"} & set(report.causes), report.text()
    assert all(it.kept_bytes == 0 for it in report.iterations)


def test_losses_summed_with_their_graph_leak_what_autograd_saved():
    model = cases.mlp()
    x, y = cases._batch(0, B, 256, 256)
    saved = _saved_bytes(lambda: torch.nn.functional.mse_loss(model(x), y),
                         exclude=list(model.parameters()))
    assert saved == 2 * OUT_BYTES + OUT_BYTES + HIDDEN_BYTES   # x, y, output, ReLU output
    report = gml.growth(cases.losses_summed(steps=4))
    assert report.causes == ["leak"] * 4
    assert [it.kept_bytes for it in report.iterations] == [saved] * 4
    for it in report.iterations[1:]:
        assert it.allocated_growth_bytes == saved        # every byte of growth is explained
    _no_leak(gml.growth(cases.losses_summed(steps=4, fixed=True)))


def test_predictions_kept_stay_at_the_output_layer():
    report = gml.growth(cases.predictions_kept(steps=4))
    assert report.causes == ["leak"] * 4
    for it in report.iterations:
        assert it.kept_bytes == OUT_BYTES
        (site,) = it.kept
        assert site.category == "activation"
        assert site.frames[0]["filename"].endswith("linear.py")     # made by the last Linear
        assert "_train" in site.where and len(site.iterations) == 4
    _no_leak(gml.growth(cases.predictions_kept(steps=4, fixed=True)))


def test_reference_cycle_stays_until_gc_collect_frees_it():
    report = gml.growth(cases.reference_cycle(steps=4))
    assert report.causes == ["leak"] * 4
    lines, start = inspect.getsourcelines(cases.reference_cycle)
    gc_line = start + next(i for i, ln in enumerate(lines) if "gc.collect()" in ln
                           and "frees" in ln)
    last_end = report.iterations[-1].end
    for it in report.iterations:
        (site,) = it.kept
        assert site.bytes == OUT_BYTES
        assert all(f is not None and f >= last_end for f in site.freed_at)   # after the loop
        assert site.freed_by[0]["line"] == gc_line                           # by gc.collect()
    assert gc.isenabled()
    _no_leak(gml.growth(cases.reference_cycle(steps=4, fixed=True)))


def test_jupyter_out_keeps_each_cells_result_and_its_graph():
    model = cases.mlp()
    x, _ = cases._batch(0, B, 256, 256)
    saved = _saved_bytes(lambda: model(x).relu(), exclude=[x, *model.parameters()])
    assert saved == HIDDEN_BYTES + OUT_BYTES             # ReLU's hidden output and the result
    report = gml.growth(cases.jupyter_out(steps=4))
    assert report.causes == ["leak"] * 4
    assert [it.kept_bytes for it in report.iterations] == [saved] * 4
    assert [it.kept[0].where.split(",")[0] for it in report.iterations] == \
        [f"cell In[{n}]" for n in range(1, 5)]
    assert all(f is None for it in report.iterations for s in it.kept for f in s.freed_at)
    _no_leak(gml.growth(cases.jupyter_out(steps=4, fixed=True)))


def test_stored_traceback_keeps_the_raising_frames_tensors():
    report = gml.growth(cases.stored_traceback(steps=4))
    assert report.causes == ["leak"] * 4
    frame_locals = OUT_BYTES + 2 * HIDDEN_BYTES + OUT_BYTES   # x (an argument), h, a, out
    assert [it.kept_bytes for it in report.iterations] == [frame_locals] * 4
    wheres = {s.where for s in report.iterations[0].kept}
    assert any("_checked_forward" in w for w in wheres)
    _no_leak(gml.growth(cases.stored_traceback(steps=4, fixed=True)))


def test_optimizer_state_is_one_time_state_of_the_first_step():
    model = cases.mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = cases._batch(0, B, 256, 256)
    cases._train(model, opt, x, y)
    moments = sum(st[k].untyped_storage().nbytes() for st in opt.state.values()
                  for k in ("exp_avg", "exp_avg_sq"))
    params = sum(p.numel() * 4 for p in model.parameters())
    assert moments == 2 * params
    # Adam's step counters come from torch.tensor(0.0), which runs no aten op the capture sees:
    # they are listed as existing before the capture, not as allocations of step 0
    assert all(st["step"].untyped_storage().nbytes() == 4 for st in opt.state.values())
    report = gml.growth(cases.optimizer_state(steps=4))
    assert report.causes == ["one-time state", "steady", "steady", "steady"]
    first = report.iterations[0]
    assert first.kept_bytes == moments
    assert {s.category for s in first.kept} == {"optimizer_state"}
    assert all(s.frames[0]["filename"].endswith("adam.py") for s in first.kept)
    assert all(s.iterations == ["step 0"] for s in first.kept)
    _no_leak(gml.growth(cases.optimizer_state(steps=4, fixed=True)))


def test_new_shapes_grow_reserved_at_new_lengths_only():
    lengths = (32, 64, 32, 96, 64, 96)
    report = gml.growth(cases.new_shapes(lengths=lengths))
    _no_leak(report)
    seen = set()
    for it, length in zip(report.iterations, lengths):
        if length in seen:
            assert it.cause == "steady", (length, it.why)   # same sizes: the cache serves them
        if it.cause == "new shapes":
            assert length not in seen and it.reserved_growth_bytes > 0
            assert any(t.seen_at is None for t in it.triggers)
        seen.add(length)
    its = report.iterations
    assert its[-1].reserved_bytes > its[0].reserved_bytes      # reserved grew; allocated at the
    last_of = {}                                               # end depends only on the length
    for it, length in zip(its, lengths):
        if length in last_of:
            assert it.allocated_bytes == last_of[length].allocated_bytes
        last_of[length] = it
    assert report.causes.count("new shapes") >= 2
    padded = gml.growth(cases.new_shapes(lengths=lengths, fixed=True))
    assert padded.causes[1:] == ["steady"] * (len(lengths) - 1)


def test_fragmentation_same_step_same_peak_more_reserved_and_expandable_fixes_it():
    rec = cases.fragmentation(steps=3)
    report = gml.growth(rec)
    assert report.causes == ["new shapes", "fragmentation", "steady"]
    step1 = report.iterations[1]
    assert step1.peak_allocated_bytes == report.iterations[0].peak_allocated_bytes
    assert step1.allocated_growth_bytes == 0 and step1.kept_bytes == 0
    assert step1.gap_bytes - report.iterations[0].gap_bytes == step1.reserved_growth_bytes > 0
    assert all(t.seen_at is not None and t.seen_at < step1.start for t in step1.triggers)
    fixed = gml.growth(rec, alloc_conf="expandable_segments:True")
    assert fixed.causes == ["new shapes", "steady", "steady"]


def test_iteration_marks_metadata_and_explicit_starts():
    trace = [{"action": "alloc", "user_metadata": m} for m in ["", "a", "a", "", "b", "b", "a"]]
    assert iteration_spans(trace) == [("a", 1, 3), ("b", 4, 6), ("a", 6, 7)]
    assert iteration_spans(trace, [0, 4]) == [("iteration 0", 0, 4), ("iteration 1", 4, 7)]
    with pytest.raises(GrowthError, match="no iteration marks"):
        iteration_spans([{"action": "alloc"}])
    for bad in ([3, 2], [0, 99], "x", [-1]):
        with pytest.raises(GrowthError):
            iteration_spans(trace, bad)


def test_capture_entries_carry_metadata_and_free_frames():
    with gml.capture() as rec:
        a = torch.ones(300)
        rec.set_memory_metadata("step 0")
        b = torch.ones(200)
        del a
        rec.set_memory_metadata("")
        del b
    tags = [(e["action"], e["size"], e["user_metadata"]) for e in rec.trace]
    assert tags[:2] == [("alloc", 1200, ""), ("alloc", 800, "step 0")]
    frees = [e for e in rec.trace if e["action"] == "free_requested"]
    assert [e["user_metadata"] for e in frees] == ["step 0", ""]
    assert frees[0]["frames"][0]["name"] == inspect.currentframe().f_code.co_name
    with pytest.raises(TypeError):
        rec.set_memory_metadata(3)


def test_a_snapshot_of_a_simulated_gpu_reads_the_same():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    gpu.record_memory_history()
    kept = []
    for i in range(3):
        gpu.set_memory_metadata(f"step {i}")
        tmp = gpu.empty(4 << 20)
        kept.append(gpu.empty(1 << 20))     # a leak: one MiB a step, from the same line
        tmp.free()
    gpu.set_memory_metadata("")
    report = gml.growth(gpu)
    assert report.causes == ["leak"] * 3
    assert [it.kept_bytes for it in report.iterations] == [1 << 20] * 3
    assert report.result.reproduced                        # a faithful replay of the record
    snap = gpu.snapshot()
    assert gml.growth(snap).causes == report.causes


def test_report_text_html_and_figure(tmp_path):
    report = gml.growth(cases.optimizer_state(steps=3))
    text = report.text()
    assert "one-time state" in text and "adam.py" in text and "step 2" in text
    html = report._repr_html_()
    assert html.startswith("<table>") and "one-time state" in html
    assert "GrowthReport" in repr(report) and "0x" not in repr(report)
    fig = report.figure()
    assert len(fig.axes) == 3        # the timeline, the ends, the growth of reserved
    fig.savefig(tmp_path / "growth.png")
    assert (tmp_path / "growth.png").stat().st_size > 0


def test_bad_input_gets_one_line():
    with pytest.raises(GrowthError, match="needs a capture"):
        gml.growth(42)
    with pytest.raises(GrowthError, match="no trace"):
        gml.growth({"segments": [], "device_traces": [[]]})
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    gpu.record_memory_history()
    gpu.empty(10)
    with pytest.raises(GrowthError, match="no iteration marks"):
        gml.growth(gpu)


def test_exercise_10_runs_the_loop_and_judges_by_growth():
    from gpumemlab.lessons import judge
    from gpumemlab.units import format_size
    classes = judge("10.ex", "out.argmax(1)")          # right values, but a tensor a step
    assert not classes.passed and "memory grows" in classes.message
    assert format_size(B * 8) in classes.message       # 512 int64 class indices stay per step
    assert classes.figures["bytes_that_stay_per_step"] == [B * 8] * 4
    detached = judge("10.ex", "out.detach()")          # shares the output's storage
    assert not detached.passed and format_size(OUT_BYTES) in detached.message
    assert judge("10.ex", "out.argmax(dim=1).tolist()").passed
    assert not judge("10.ex", "out.argmax(1).tolist(); import os").passed


def test_exercise_10_is_judged_as_on_a_gpu_where_cpu_frees_the_device_copy():
    """On a GPU, .cpu() copies to the host and the device copy goes; the CPU capture must not
    teach the opposite (there .cpu() would return the same storage)."""
    from gpumemlab.lessons import judge
    moved = judge("10.ex", "out.argmax(1).cpu()")
    assert moved.passed and "on the host" in moved.message
    assert moved.figures["bytes_that_stay_per_step"] == [0] * 4
    assert judge("10.ex", "out.argmax(1).cpu().tolist()").passed
    assert not judge("10.ex", "out.detach().cpu()").passed          # logits, not classes
    refused = judge("10.ex", "out.argmax(1).numpy()")               # torch refuses it on a GPU
    assert not refused.passed and ".cpu() first" in refused.message
    assert "of Python ints" in judge("10.ex", "out.argmax(1).tolist()").message

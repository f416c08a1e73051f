"""Capture of real torch code on the CPU: order, sizes, categories, frames, snapshot format."""
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from gpumemlab.recordings.capture import CATEGORIES, capture  # noqa: E402
from gpumemlab.lessons.capture_demo import tiny_transformer, train_step  # noqa: E402
from gpumemlab.recordings.files import dump_snapshot, load_snapshot, normalize_snapshot  # noqa: E402


def _allocs(rec):
    return [e for e in rec.trace if e["action"] == "alloc"]


def test_alloc_and_free_in_order_with_sizes():
    with capture() as rec:
        a = torch.empty(1000, dtype=torch.float32)     # 4000 bytes
        b = torch.empty(10, dtype=torch.uint8)         # 10 bytes
        v = a.view(10, 100)                            # a view: no new storage
        del a
        marker_free_a = len(rec.entries)
        del v                                          # last reference to a's storage
        del b
    actions = [(e["action"], e["size"]) for e in rec.entries]
    assert actions == [("alloc", 4000), ("alloc", 10),
                       ("free_requested", 4000), ("free_completed", 4000),
                       ("free_requested", 10), ("free_completed", 10)]
    assert marker_free_a == 2          # del a alone freed nothing: the view held the storage
    first, second = rec.entries[0], rec.entries[1]
    assert rec.entries[2]["addr"] == first["addr"] != second["addr"]
    assert all(e["addr"] % 512 == 0 for e in rec.entries)
    assert first["frames"][0]["filename"] == __file__
    assert first["frames"][0]["name"] == "test_alloc_and_free_in_order_with_sizes"


def test_in_place_ops_and_zero_size_make_no_allocation():
    x = torch.ones(256)
    with capture() as rec:
        x.add_(1)
        x.mul_(2)
        torch.empty(0)
    # x existed before: listed once up front, as an input, and nothing else
    assert [e["action"] for e in rec.trace] == ["alloc"]
    assert rec.prelude[0]["size"] == 1024 and rec.prelude[0]["category"] == "input"


def test_frees_after_exit_are_not_recorded():
    with capture() as rec:
        keep = torch.empty(64)
    n = len(rec.entries)
    del keep
    assert len(rec.entries) == n == 1


def test_training_step_categories_match_the_model():
    model, opt = tiny_transformer(d_model=64, n_layers=1, seq_len=16, vocab=128)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    with capture(model, opt) as rec:
        train_step(model, opt, batch_size=2)
    by = rec.bytes_by_category()
    assert set(by) == set(CATEGORIES)
    assert by["parameter"] == param_bytes
    assert by["gradient"] == param_bytes                 # one gradient per parameter
    assert by["optimizer_state"] >= 2 * param_bytes      # Adam: exp_avg and exp_avg_sq (+ steps)
    assert by["activation"] > 0 and by["temporary"] > 0
    assert all(e["category"] in CATEGORIES for e in _allocs(rec))
    # zero_grad(set_to_none) frees every gradient inside the capture
    grads = {e["addr"] for e in _allocs(rec) if e["category"] == "gradient"}
    freed = {e["addr"] for e in rec.entries if e["action"] == "free_completed"}
    assert grads <= freed


def test_categories_without_model_are_inferred_the_same():
    model, opt = tiny_transformer(d_model=64, n_layers=1, seq_len=16, vocab=128)
    with capture(model, opt) as exact:
        train_step(model, opt, batch_size=2)
    model, opt = tiny_transformer(d_model=64, n_layers=1, seq_len=16, vocab=128)
    with capture() as inferred:
        train_step(model, opt, batch_size=2)
    a, b = exact.bytes_by_category(), inferred.bytes_by_category()
    for cat in ("parameter", "gradient", "optimizer_state", "temporary"):
        assert a[cat] == b[cat], cat
    assert exact.allocations == inferred.allocations


def test_every_free_matches_an_earlier_alloc_and_snapshot_is_valid(tmp_path):
    model, opt = tiny_transformer(d_model=64, n_layers=1, seq_len=16, vocab=128)
    with capture(model, opt) as rec:
        train_step(model, opt, batch_size=2)
    live = {}
    for e in rec.trace:
        if e["action"] == "alloc":
            assert e["addr"] not in live
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            assert live.pop(e["addr"]) == e["size"]
    snap, notes = normalize_snapshot(rec.snapshot())
    assert notes == []
    times = [e["time_us"] for e in snap["device_traces"][0]]
    assert times == sorted(times) and len(set(times)) == len(times)
    path = dump_snapshot(rec, tmp_path / "cap.pickle")
    assert load_snapshot(path)["device_traces"][0][5]["size"] == rec.trace[5]["size"]
    proc = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and f"{len(rec.trace)} entries" in proc.stdout


def test_capture_does_not_keep_the_model_alive():
    import weakref
    model, opt = tiny_transformer(d_model=32, n_layers=1, seq_len=8, vocab=64)
    with capture(model, opt) as rec:
        train_step(model, opt, batch_size=1)
    ref = weakref.ref(model)
    del model, opt
    import gc
    gc.collect()
    assert ref() is None
    assert rec.peak_live_bytes() > 0

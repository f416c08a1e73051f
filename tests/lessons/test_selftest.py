"""gpumemlab selftest on the simulator: every lesson scenario tells its story, the JSON report has
the issue's shape, exit codes, and the child-process path (the one a real GPU uses) run on the
model, including a child that fails part way."""
import contextlib
import io
import json

import pytest

from gpumemlab.cli import main
from gpumemlab.lessons import selftest as st
from gpumemlab.devices.compare import compare, summary
from gpumemlab.devices.cuda import cuda_available
from gpumemlab.lessons.selftest_worker import measure
from gpumemlab.devices.simulated import SimulatedGPU
from gpumemlab.recordings.files import load_snapshot
from gpumemlab.recordings.replay import replay

GiB = 1024**3


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["selftest", *argv])
    return status, out.getvalue(), err.getvalue()


def test_every_lesson_has_a_scenario():
    lessons = {s.lesson for s in st.SCENARIOS}
    assert len(st.SCENARIOS) >= 8 and lessons >= {f"{i:02d}" for i in range(1, 18)} - {"11", "16"}
    assert len({s.name for s in st.SCENARIOS}) == len(st.SCENARIOS)
    # each allocator setting of lessons 05 and 06 runs under its own scenario
    confs = " ".join(s.conf(st.DEFAULT_BUDGET) for s in st.SCENARIOS)
    for key in ("max_split_size_mb", "garbage_collection_threshold", "roundup_power2_divisions",
                "expandable_segments:True"):
        assert key in confs


@pytest.mark.parametrize("budget", [st.MIN_BUDGET, 2 * GiB, 24 * GiB])
@pytest.mark.parametrize("scenario", st.SCENARIOS, ids=lambda s: s.name)
def test_each_scenario_tells_its_lesson_story(scenario, budget):
    rec = st.run_simulated(scenario, budget)
    assert scenario.story(rec) == []
    assert rec.steps and all(s["reserved"] <= budget for s in rec.steps)
    if scenario.expect_oom is not None:
        assert (st.summary(rec)["oom_step"] is not None) == scenario.expect_oom


def test_pairs_show_what_the_setting_changes():
    def run(name):
        return st.run_simulated(st.by_name(name))
    assert run("max_split_size_off").oom and not run("max_split_size_on").oom
    gc_off, gc_on = run("garbage_collection_off").stats, run("garbage_collection_on").stats
    assert gc_off["num_alloc_retries"] > 0 == gc_on["num_alloc_retries"]
    assert run("fragmentation_oom").oom and not run("expandable_segments").oom
    stored, ckpt = run("activations"), run("activations_checkpointed")
    assert stored.oom and not ckpt.oom
    assert ckpt.notes["peak_allocated"] < stored.notes["peak_allocated"]
    assert run("kv_paged").notes["max_running"] > run("kv_contiguous").notes["max_running"]
    kept, fixed = run("growing_loop_kept"), run("growing_loop_fixed")
    assert kept.notes["allocated_after_step"][-1] > kept.notes["allocated_after_step"][0] > 0
    assert set(fixed.notes["allocated_after_step"]) == {0}
    largest_first, smallest_first = run("graph_capture_order").notes["pool_reserved"]
    assert 0 < largest_first < smallest_first


def test_json_report_has_exactly_the_issue_shape():
    status, out, err = _cli("--device", "sim", "--json")
    report = json.loads(out)
    assert status == 0 and err == ""
    assert set(report) == {"cuda", "device", "torch", "scenarios"}
    assert report["cuda"] is False and isinstance(report["device"], str)
    assert isinstance(report["torch"], str)
    assert [s["name"] for s in report["scenarios"]] == [s.name for s in st.SCENARIOS]
    for s in report["scenarios"]:
        assert set(s) == {"name", "simulated_ok", "compared", "equal", "differences"}
        # without CUDA nothing claims a comparison
        assert s["simulated_ok"] is True and s["compared"] is False and s["equal"] is None
        assert s["differences"] == []


def test_text_report_and_only():
    status, out, _ = _cli("--device", "sim", "--only", "fragmentation_oom", "kv_paged")
    assert status == 0
    assert "no comparison with a real GPU" in out and "2 of 2 scenarios" in out


@pytest.mark.skipif(cuda_available(), reason="checks the no-CUDA error")
def test_cuda_without_cuda_exits_2_with_one_line():
    status, out, err = _cli("--device", "cuda", "--json")
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no CUDA device" in err


@pytest.mark.skipif(cuda_available(), reason="without CUDA, auto means the simulator")
def test_auto_without_cuda_is_the_simulator():
    status, out, _ = _cli("--json", "--only", "cache_reuse")
    assert status == 0 and json.loads(out)["cuda"] is False


@pytest.mark.parametrize("argv", [["--only", "no_such_scenario"], ["--budget", "100MiB"],
                                  ["--budget", "lots"]])
def test_bad_requests_exit_2_with_one_line(argv):
    status, out, err = _cli("--device", "sim", *argv)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_exit_status_is_1_when_a_story_or_a_comparison_fails():
    ok = {"name": "a", "simulated_ok": True, "compared": True, "equal": True, "differences": []}
    assert st.exit_status({"scenarios": [ok]}) == 0
    assert st.exit_status({"scenarios": [ok, dict(ok, equal=False)]}) == 1
    assert st.exit_status({"scenarios": [dict(ok, simulated_ok=False, compared=False,
                                              equal=None)]}) == 1


def test_child_process_path_on_the_model_compares_equal():
    """The path a CUDA run takes (a child per scenario, JSON back, compare), with the child on
    the model: the model is deterministic across processes, so every scenario is equal."""
    def child_on_model(sc, budget):
        return st.run_on_cuda(sc, budget, device="sim")
    report = st.selftest("cuda", measure=child_on_model)
    assert report["cuda"] is True
    assert [(s["name"], s["differences"]) for s in report["scenarios"] if not s["equal"]] == []
    assert st.exit_status(report) == 0


class _FailingGPU(SimulatedGPU):
    """A device whose n-th allocation raises what a CUDA error raises (a RuntimeError)."""

    def __init__(self, *a, fail_at, **kw):
        super().__init__(*a, **kw)
        self.calls, self.fail_at = 0, fail_at

    def empty(self, nbytes, stream=0):
        self.calls += 1
        if self.calls == self.fail_at:
            raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")
        return super().empty(nbytes, stream)


def test_an_error_mid_scenario_is_a_difference_and_the_others_still_run():
    sc = st.by_name("fragmentation_oom")
    measured = measure(sc, _FailingGPU(st.DEFAULT_BUDGET, alloc_conf="", fail_at=5))
    assert measured["error"].startswith("RuntimeError at step 5: CUDA error: an illegal memory")
    assert len(measured["steps"]) == 5   # the big tensor, its free, pieces 0-2
    diffs = compare(summary(st.run_simulated(sc)), measured)
    assert diffs and "the GPU run failed after 5 of" in diffs[0]

    def measure_one_failing(scenario, budget):
        if scenario.name == "empty_cache":
            return measure(scenario, _FailingGPU(budget, alloc_conf="", fail_at=3))
        return summary(st.run_simulated(scenario, budget))
    report = st.selftest("cuda", measure=measure_one_failing)
    bad = [s for s in report["scenarios"] if not s["equal"]]
    assert [s["name"] for s in bad] == ["empty_cache"] and "failed" in bad[0]["differences"][0]
    assert len(report["scenarios"]) == len(st.SCENARIOS) and st.exit_status(report) == 1


def test_a_child_that_dies_is_reported():
    ghost = st.Scenario("not_registered", "00", st.S.fragmentation_oom)
    measured = st.run_on_cuda(ghost, st.DEFAULT_BUDGET, device="sim")
    assert measured["steps"] == [] and "exited with status" in measured["error"]
    assert "KeyError" in measured["error"]


def test_compare_names_each_kind_of_difference():
    base = summary(st.run_simulated(st.by_name("fragmentation_oom")))
    assert compare(base, base) == []
    moved = json.loads(json.dumps(base))
    moved["steps"][3][2] += 512
    moved["segments"][0][3][1][0] += 512
    moved["stats"]["num_alloc_retries"] += 1
    moved["oom_step"] = None
    diffs = "\n".join(compare(base, moved))
    for word in ("first OOM", "step 3", "allocated", "segments:", "num_alloc_retries"):
        assert word in diffs


def test_worker_snapshot_is_a_recording_that_replays_exactly(tmp_path):
    """What record_fixtures.py writes on a card, written here by the child on the model."""
    sc = st.by_name("kv_contiguous")
    path = tmp_path / "kv.pickle"
    measured = st.run_on_cuda(sc, st.DEFAULT_BUDGET, device="sim", snapshot_path=path)
    assert measured["error"] is None
    snap = load_snapshot(path)
    assert not any("frames" in e for e in snap["device_traces"][0])
    result = replay(snap, total_memory=st.DEFAULT_BUDGET, stop_on_oom=False)
    assert result.address_mismatches == 0 and result.reproduced


def test_lesson_10_and_11_workloads_follow_the_rules():
    """Known answers: a kept output of 8 MiB + 1,000 bytes adds round_size of it (to 512 B) a
    step; lesson 11's shared pool reserves what its exercise computes for the same orders."""
    from gpumemlab.lessons.pools_and_graphs import LARGEST_FIRST_13, capture_graphs

    def reserved_for_order(order):
        return capture_graphs(list(order))[0].memory_reserved()

    rec = st.run_simulated(st.by_name("growing_loop_kept"), 2 * GiB)
    out = 2 * GiB // 256 + 1000
    rounded = (out + 511) // 512 * 512
    after = rec.notes["allocated_after_step"]
    assert [b - a for a, b in zip(after, after[1:])] == [rounded] * (len(after) - 1)
    rec = st.run_simulated(st.by_name("graph_capture_order"), 2 * GiB)
    assert rec.notes["pool_reserved"] == [reserved_for_order(LARGEST_FIRST_13),
                                          reserved_for_order(reversed(LARGEST_FIRST_13))]
    # the graphs were reset and the cache emptied: nothing stays reserved
    assert rec.steps[-1]["reserved"] == 0


def test_cuda_pools_api_matches_the_simulated_one():
    """The pool/graph methods a workload calls exist on both devices with the same names."""
    from gpumemlab.devices.cuda import CudaGPU

    for name in ("graph_pool_handle", "CUDAGraph", "graph", "MemPool", "use_mem_pool"):
        assert callable(getattr(SimulatedGPU, name)) and callable(getattr(CudaGPU, name)), name

"""gml.experiment: the model's prediction beside a measurement, one line per scenario; without
CUDA one line that says so. The measured path runs its child process on the model here."""
import json

import pytest

import gpumemlab as gml
from gpumemlab.lessons import selftest as st

GiB = 1024**3


def _child_on_model(scenario, budget):
    return st.run_on_cuda(scenario, budget, device="sim")


def test_without_cuda_one_line_and_the_prediction():
    out = gml.experiment("fragmentation_oom", gml.SimulatedGPU("8GiB", alloc_conf=""))
    (r,) = out
    line = str(out)
    assert "\n" not in line and "not a CUDA GPU here, so the simulator only" in line
    assert r.equal is None and out.equal is None and r.measured is None
    assert f"an OOM at step {r.predicted['oom_step']}" in line
    assert r.record.oom and r.record.notes["chunk"] == 8 * GiB // 16   # the card's size is used


def test_without_cuda_several_scenarios_say_it_once():
    text = str(gml.experiment(["kv_contiguous", "kv_paged"], gml.SimulatedGPU("4GiB")))
    lines = text.splitlines()
    assert len(lines) == 3 and lines[0].startswith("Not a CUDA GPU here")
    assert "not a CUDA GPU" not in "".join(lines[1:]) and "no OOM in 1 step," in lines[2]


def test_measured_beside_predicted():
    out = gml.experiment(["activations", "activations_checkpointed"],
                         gml.SimulatedGPU("2GiB"), measure=_child_on_model)
    assert out.equal is True and len(str(out).splitlines()) == 2
    for r in out:
        assert "the model predicts" in str(r) and "your GPU measured" in str(r)
        assert f"the same at all {len(r.predicted['steps'])} steps" in str(r)


def test_a_difference_is_shown_first():
    def off_by_a_block(scenario, budget):
        m = json.loads(json.dumps(_child_on_model(scenario, budget)))
        m["steps"][2][2] += 512
        return m
    (r,) = gml.experiment("cache_reuse", gml.SimulatedGPU("2GiB"), measure=off_by_a_block)
    assert r.equal is False and "1 difference(s), first: step 2" in str(r)


def test_what_the_card_gave_is_said_once():
    def with_budget_lines(scenario, budget):
        return dict(_child_on_model(scenario, budget), budget="using at most 2.00 GiB of GPU 0",
                    released="closed the CudaGPU: freed 0 live allocation(s)")
    lines = str(gml.experiment(["kv_contiguous", "kv_paged"], gml.SimulatedGPU("2GiB"),
                               measure=with_budget_lines)).splitlines()
    assert len(lines) == 3 and lines[2] == ("On the card (a fresh process each): using at most "
                                            "2.00 GiB of GPU 0; closed the CudaGPU: freed 0 "
                                            "live allocation(s)")


def test_a_card_that_could_not_run_it():
    def busy(scenario, budget):
        return {"name": scenario.name, "steps": [], "oom_step": None, "segments": [],
                "stats": {}, "error": "CardTooBusyError: GPU 0 is too busy"}
    (r,) = gml.experiment("kv_paged", gml.SimulatedGPU("2GiB"), measure=busy)
    assert r.equal is False and "your GPU could not run it: CardTooBusyError" in str(r)


def test_unknown_scenario():
    with pytest.raises(KeyError, match="no scenario"):
        gml.experiment("nope", gml.SimulatedGPU("2GiB"))


def test_every_lesson_runs_its_experiment_on_gml_device():
    import ast
    import re
    from pathlib import Path
    src = Path(__file__).resolve().parents[2] / "notebooks" / "src"
    # lesson 16 plans a run before any card is used: what it would measure on a real card is the
    # planner against real recordings of the same steps, which no selftest scenario can stand for
    no_experiment = {"00", "16"}
    lessons = sorted(p for p in src.glob("[0-9][0-9]_*.py") if p.name[:2] not in no_experiment)
    shown = set()
    for path in lessons:
        text = path.read_text()
        assert "gpu = gml.device()" in text, path.name
        calls = re.findall(r"gml\.experiment\((.*?), gpu\)", text, flags=re.S)
        assert len(calls) == 1, path.name
        names = ast.literal_eval(calls[0])
        names = [names] if isinstance(names, str) else names
        assert all(st.by_name(n).lesson == path.name[:2] or n == "fragmentation_oom"
                   for n in names), path.name
        shown.update(names)
    assert len(lessons) >= 8 and shown == {s.name for s in st.SCENARIOS}

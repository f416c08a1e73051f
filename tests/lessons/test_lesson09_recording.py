"""Lesson 09's recording: a real torch training loop (gpumemlab/lessons/training_run.py) run on a
simulated card until it failed. It ships in the package under a name that says nothing of the
diagnosis, looks like real work (many sizes, many lines of code, steps and an evaluation pass),
names no machine in its frames, ends in an OOM the faithful replay reproduces and the doctor
diagnoses, and the script in the repo makes it again, byte for byte."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

import gpumemlab as gml
from gpumemlab.lessons.diagnose_your_run import RECORDING, recording_09

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "notebooks" / "src" / "09_diagnose_your_run.py"


@pytest.fixture(scope="module")
def snap():
    return recording_09()


def test_it_ships_in_the_package_under_a_neutral_name():
    assert RECORDING.is_file() and RECORDING.parent == ROOT / "gpumemlab" / "lessons" / "data"
    assert not re.search(r"frag|exhaust|split|expand", RECORDING.name, re.I)
    lesson = LESSON.read_text(encoding="utf-8")
    assert "sim_fragmentation_oom" not in lesson and "gives a hint" not in lesson
    assert "from gpumemlab.lessons.diagnose_your_run import RECORDING" in lesson


def test_its_provenance_is_in_the_repo():
    readme = (RECORDING.parent / "README.md").read_text(encoding="utf-8")
    assert "python -m gpumemlab.lessons.training_run" in readme
    assert (ROOT / "gpumemlab" / "lessons" / "training_run.py").is_file()


def test_it_looks_like_real_work(snap):
    trace = snap["device_traces"][0]
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert len(allocs) >= 500 and len({e["size"] for e in allocs}) >= 30
    lines = Counter((f["filename"], f["line"]) for e in allocs for f in e["frames"][:1])
    script_lines = {line for (name, line) in lines if name.endswith("lessons/training_run.py")}
    torch_files = {name for (name, _line) in lines if name.startswith("torch/")}
    assert len(script_lines) >= 8 and len(torch_files) >= 4
    marks = {e["user_metadata"] for e in trace}
    assert {"step 0", "step 1"} <= marks and any(m.startswith("eval") for m in marks)
    # the weights existed before recording began: no frames, as on a GPU
    assert any(not e["frames"] for e in allocs)


def test_its_frames_name_no_machine(snap):
    names = {f["filename"] for e in snap["device_traces"][0] for f in e["frames"]}
    assert names and not [n for n in names if n.startswith("/") or re.match(r"[A-Za-z]:", n)]


def test_it_ends_in_an_oom_that_replays_and_the_doctor_diagnoses(snap):
    trace = snap["device_traces"][0]
    assert trace[-1]["action"] == "oom"
    faithful = gml.replay(RECORDING)
    assert faithful.reproduced and faithful.oom["index"] == len(trace) - 1
    assert gml.doctor(RECORDING).kind == "fragmentation"


@pytest.mark.slow
def test_the_script_makes_it_again(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.__version__.startswith("2.13"):
        pytest.skip(f"the shipped recording was made with torch 2.13, not {torch.__version__}")
    from gpumemlab.lessons import training_run

    made = training_run.main(tmp_path / "again.pickle")
    assert made.read_bytes() == RECORDING.read_bytes()

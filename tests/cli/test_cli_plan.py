"""``gpumemlab plan SCRIPT.py ARGS``: an unmodified profiling script planned on fake CUDA tensors,
the recording window, fits on a big card and not on a small one, one line for a script fake
tensors cannot run. Needs a C++ compiler for the fake-CUDA library (skipped without one)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(TESTS, "fixtures", "planner", "profile_mlp.py")
MiB = 1 << 20


def _plan(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(TESTS))
    return subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600)


def test_unmodified_script_window_and_fit(library, tmp_path):
    snap = tmp_path / "snap.pickle"
    run = _plan("--json", "--total-memory", "80GiB", "--context", "512MiB", SCRIPT,
                "--width", "1024", "--layers", "4", "--steps", "3", "--snapshot", str(snap))
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout)
    assert "step 2: allocated" in run.stderr              # the script's own prints, on stderr
    assert r["fits"] is True and r["total_memory_bytes"] == 80 << 30
    assert r["window"].startswith("from torch.cuda.memory._record_memory_history")
    assert r["traced_on"] == "fake CUDA tensors" and r["exit_status"] == 0
    # what stays between steps, by hand: 4 x Linear(1024, 1024) in fp32, AdamW's two moments,
    # a 0-d fp32 step counter per tensor (one 512 B block each), two cuBLAS workspaces
    params = 4 * (1024 * 1024 + 1024) * 4
    steady = 3 * params + 8 * 512 + 2 * (8 * MiB + 128 * 1024)
    assert r["peak_allocated_bytes"] > steady
    assert r["peak_allocated_bytes"] <= r["whole_run_peak_allocated_bytes"]
    assert {n["what"] for n in r["not_seen"]} >= {"CUDA context", "cuBLAS workspace (main thread)"}
    import gpumemlab as gml
    replayed = gml.replay(str(snap))                      # the window's snapshot, in torch's format
    assert replayed.reproduced and replayed.peak_reserved <= r["peak_reserved_bytes"]


def test_bf16_autocast_and_inference_run_on_fake_cuda(library):
    base = json.loads(_plan("--json", SCRIPT, "--steps", "2").stdout)
    run = _plan("--json", SCRIPT, "--steps", "2", "--bf16")
    assert run.returncode == 0, run.stderr
    assert "output dtype: torch.bfloat16" in run.stderr      # autocast did not switch itself off
    bf16 = json.loads(run.stdout)
    run = _plan("--json", SCRIPT, "--steps", "2", "--inference")
    assert "output dtype: torch.float32" in run.stderr
    infer = json.loads(run.stdout)
    # inference: no gradients, no optimizer state; training holds at least 3x the weights
    params = 4 * (1024 * 1024 + 1024) * 4
    assert infer["peak_allocated_bytes"] < params + 2 * params
    assert base["peak_allocated_bytes"] > 3 * params
    assert bf16["peak_allocated_bytes"] != base["peak_allocated_bytes"]


def test_attention_takes_the_flash_kernel_as_on_a_recent_card(library):
    run = _plan("--json", os.path.join(TESTS, "fixtures", "planner", "attention.py"))
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout)
    # q, k, v, their gradients and the output: 4 MiB each in bf16 (1 x 8 x 4096 x 64 x 2 B); the
    # math path would hold the 8 x 4096 x 4096 scores (256 MiB in bf16) and their softmax
    assert 6 * 4 * MiB <= r["peak_allocated_bytes"] < 64 * MiB


def test_does_not_fit_on_a_small_card(library):
    run = _plan("--json", "--total-memory", "600MiB", "--context", "512MiB", SCRIPT,
                "--width", "2048", "--steps", "2")
    assert run.returncode == 1, run.stderr      # the answer is no: exit 1, as verify's
    r = json.loads(run.stdout)
    assert r["fits"] is False and r["oom"]["size"] > 0
    assert r["failed"] == ["device"] and r["host"]["pinned_requests"] == 0   # it pins nothing
    assert r["window"].startswith("the whole run")


def test_a_script_fake_tensors_cannot_run_gets_one_line(library):
    run = _plan(os.path.join(TESTS, "fixtures", "planner", "data_dependent_shape.py"))
    assert run.returncode == 2
    last = run.stderr.strip().splitlines()[-1]
    assert "fake tensors could not run the step" in last and "nonzero" in last
    assert "Traceback" not in run.stderr


def test_a_value_read_on_the_gpu_is_a_placeholder_and_said(library):
    run = _plan("--json", os.path.join(TESTS, "fixtures", "planner", "reads_a_value.py"))
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout)
    assert r["placeholder_reads"] == 1 and "positive" not in run.stderr   # 0.0 > 0 is False
    assert any("answered 0" in n["how"] for n in r["not_seen"])


def test_bad_arguments_are_one_line():
    run = _plan("--total-memory", "lots", SCRIPT)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    run = _plan("no_such_script.py")
    assert run.returncode == 2 and "no such script" in run.stderr


def test_hopper_has_the_larger_cublas_workspace(library):
    r80 = json.loads(_plan("--json", SCRIPT, "--steps", "1").stdout)
    r90 = json.loads(_plan("--json", "--arch", "sm90", SCRIPT, "--steps", "1").stdout)
    ws = {n["what"]: n["estimate_bytes"] for n in r90["not_seen"]}
    assert ws["cuBLAS workspace (main thread)"] == 32 * MiB + 128 * 1024
    # two threads, each 24 MiB more
    assert r90["peak_allocated_bytes"] - r80["peak_allocated_bytes"] == 2 * 24 * MiB


OFFLOAD = os.path.join(TESTS, "fixtures", "planner", "save_on_cpu_relu.py")


def test_host_budget_makes_a_save_on_cpu_step_not_fit(library):
    # eight saved activations of 24 MiB, each its own pinned request: 8 x 32 MiB = 256 MiB under
    # the default rounding, over a 200 MiB host budget (exit 1, the host budget named)
    run = _plan("--host-memory", "200MiB", OFFLOAD)
    assert run.returncode == 1, run.stderr
    assert "does NOT fit: host budget: pins 256.00 MiB of 200.00 MiB" in run.stdout
    # two steps ask 16 times; the second step reuses the first one's cached blocks
    assert "16 requests of 384.00 MiB pin 256.00 MiB at the peak" in run.stdout
    # above pinned_max_round_threshold_mb:16 a 24 MiB request is pinned at its size: 192 MiB
    run = _plan("--json", "--host-memory", "200MiB", "--alloc-conf",
                "pinned_max_round_threshold_mb:16", OFFLOAD)
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout)
    assert r["host"] == {"pinned_peak_bytes": 192 * MiB, "pinned_requests": 16,
                         "requested_bytes": 16 * 24 * MiB}
    assert r["fits"] is True and r["failed"] == [] and r["host_memory_bytes"] == 200 * MiB


def test_bad_host_memory_is_one_line(library):
    run = _plan("--host-memory", "lots", OFFLOAD)
    assert run.returncode == 2 and "--host-memory" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1

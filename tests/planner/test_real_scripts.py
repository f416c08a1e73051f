"""``gpumemlab plan`` on unmodified public training scripts (tests/fixtures/real_scripts, see its
PROVENANCE.md): each runs to its end on fake CUDA tensors, or stops where a real run stops too.

Each case runs in a copy of its folder under tmp_path (the scripts write checkpoints and logs
beside them) with the synthetic data it reads made there first: random token files for nanoGPT,
random words for word_language_model, a random graph in Cora's format for gat, random text for
minGPT's chargpt; time_sequence_prediction's own generator makes its data. Nothing is downloaded.
"""
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest


TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(TESTS, "fixtures", "real_scripts")
MiB = 1 << 20


def _nanogpt_data(root):
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(root, "data", "shakespeare_char"))
    for name, n in (("train", 20000), ("val", 4000)):
        rng.integers(0, 65, n, dtype=np.uint16).tofile(
            os.path.join(root, "data", "shakespeare_char", f"{name}.bin"))


def _words(root):
    rnd = random.Random(0)
    words = [f"w{i}" for i in range(300)]
    os.makedirs(os.path.join(root, "synth"))
    for name, lines in (("train", 400), ("valid", 60), ("test", 60)):
        with open(os.path.join(root, "synth", f"{name}.txt"), "w") as f:
            for _ in range(lines):
                f.write(" " + " ".join(rnd.choice(words) for _ in range(12)) + " \n")


def _cora(root):
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(root, "cora"))
    ids = np.arange(1000, 1300)
    with open(os.path.join(root, "cora", "cora.content"), "w") as f:
        for i in ids:
            feats = rng.integers(0, 2, 50)
            f.write("\t".join([str(i)] + [str(x) for x in feats] + [f"c{rng.integers(0, 7)}"]) + "\n")
    with open(os.path.join(root, "cora", "cora.cites"), "w") as f:
        for _ in range(600):
            a, b = rng.choice(ids, 2, replace=False)
            f.write(f"{a}\t{b}\n")


def _sine(root):
    subprocess.run([sys.executable, "generate_sine_wave.py"], cwd=root, check=True, timeout=120)


def _text(root):
    rnd = random.Random(1)
    chars = "abcdefghijklmnopqrstuvwxyzOG ,.!\n"
    with open(os.path.join(root, "input.txt"), "w") as f:
        f.write("O God, O God! " + "".join(rnd.choice(chars) for _ in range(20000)))


WLM = ["--accel", "--data", "synth", "--epochs", "1", "--dry-run", "--save", "model.pt"]
SMALL_GPT = ["--real_data=False", "--batch_size=2", "--block_size=256"]
CHAR = ["config/train_shakespeare_char.py", "--compile=False", "--max_iters=2", "--eval_iters=2",
        "--batch_size=4", "--block_size=64"]
# name: (folder, script, args, data maker, what the plan says; slow)
CASES = {
    "nanogpt_bench_eager": ("nanogpt", "bench.py", SMALL_GPT + ["--compile=False"], None, "ok", True),
    "nanogpt_bench_compiled": ("nanogpt", "bench.py", SMALL_GPT, None, "ok", True),
    "nanogpt_train_char_bf16": ("nanogpt", "train.py", CHAR + ["--eval_interval=1"], _nanogpt_data,
                                "ok", True),
    "nanogpt_train_char_fp16_gradscaler": ("nanogpt", "train.py", CHAR + ["--dtype=float16"],
                                           _nanogpt_data, "ok", True),
    "wlm_lstm": ("word_language_model", "main.py", WLM, _words, "ok", True),
    "wlm_gru": ("word_language_model", "main.py", WLM + ["--model", "GRU"], _words, "ok", True),
    "wlm_transformer": ("word_language_model", "main.py", WLM + ["--model", "Transformer"], _words,
                        "ok", True),
    "ddp_tutorial_single_gpu": ("ddp_single_gpu", "single_gpu.py", ["1", "5"], None, "ok", True),
    "regression_cpu_only": ("regression", "main.py", [], None, "ok", False),
    "gat_cora": ("gat", "main.py", ["--epochs", "2"], _cora, "ok", False),
    "mingpt_adder": ("mingpt", "projects/adder/adder.py", ["--trainer.max_iters=2"], None, "ok",
                     True),
    # the script's own: torch.load's weights_only default (torch >= 2.6) refuses its numpy data
    "time_sequence_prediction": ("time_sequence_prediction", "train.py", ["--steps", "1"], _sine,
                                 "the script raised UnpicklingError", False),
    # indexing with a list (t[:, [-1]]) in its sampling: the index is moved with .to first
    "mingpt_chargpt": ("mingpt", "projects/chargpt/chargpt.py", ["--trainer.max_iters=2"], _text,
                       "ok", True),
}


def _params(cases):
    for name, case in cases.items():
        marks = [pytest.mark.slow] if case[5] else []
        yield pytest.param(name, *case[:5], id=name, marks=marks)


@pytest.mark.parametrize("name,folder,script,args,make_data,expect", list(_params(CASES)))
def test_the_planner_runs_a_real_script(library, tmp_path, name, folder, script, args, make_data,
                                        expect):
    root = tmp_path / folder
    shutil.copytree(os.path.join(SCRIPTS, folder), root)
    if make_data:
        make_data(str(root))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(TESTS), str(root)]))
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", "--json", "--total-memory",
                          "80GiB", script, *args], cwd=root, env=env, capture_output=True,
                         text=True, timeout=400)
    r = json.loads(run.stdout[run.stdout.index("{"):])
    assert "UserWarning: The .grad attribute" not in run.stderr
    if expect == "ok":
        assert run.returncode == 0, r["error"]
        assert r["fits"] is True and r["error"] is None and r["stopped_at"] is None
        assert r["peak_allocated_bytes"] > 0 or name == "regression_cpu_only"
    else:
        assert run.returncode == 2 and r["fits"] is None
        assert r["error"].startswith(expect), r["error"]
        assert r["stopped_at"]["line"] > 0


def test_a_script_that_never_touches_cuda_plans_zero_gpu_bytes(library, tmp_path):
    """regression/main.py fits a polynomial on the CPU only: its data is real, nothing is on the
    card; its loop ends on a loss it computes for real (a fake one would read 0)."""
    root = tmp_path / "regression"
    shutil.copytree(os.path.join(SCRIPTS, "regression"), root)
    run = subprocess.run([sys.executable, "-m", "gpumemlab.cli", "plan", "--json", "main.py"],
                         cwd=root, env=dict(os.environ, PYTHONPATH=os.path.dirname(TESTS)),
                         capture_output=True, text=True, timeout=300)
    r = json.loads(run.stdout[run.stdout.index("{"):])
    assert r["trace_entries"] == 0 and r["peak_allocated_bytes"] == 0
    assert r["placeholder_reads"] == 0      # every value it read was a real CPU one
    assert "Loss:" in run.stderr

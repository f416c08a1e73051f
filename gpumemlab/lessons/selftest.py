"""``gpumemlab selftest``: every lesson's experiment on the model and, where there is CUDA, on
the real card, compared step by step (``compare``).

Each :class:`Scenario` names a workload of ``gpumemlab.devices.scenarios`` or of a lesson's module here, the lesson it
comes from, the ``PYTORCH_CUDA_ALLOC_CONF`` it runs under and the story the lesson tells about it
(an OOM or none, and a figure or two), which the simulator must reproduce (``simulated_ok``).

On a real card each scenario runs in a child process of its own (``selftest_worker``), because
PyTorch reads allocator settings once per process and some (``max_split_size_mb``,
``garbage_collection_threshold``) cannot be set back at run time; a CUDA error then also stays in
that child, and the other scenarios still run.

Extension point: a new lesson experiment (e.g. MemPool / CUDA-graph pools once the devices have
them) is one more ``Scenario`` in ``SCENARIOS``, with a workload that runs on both devices.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpumemlab.devices import scenarios as S
from gpumemlab.devices.compare import compare, summary
from gpumemlab.units import format_size, parse_size
from .activations import activations
from .allocator_settings import big_then_small, growing, max_split_conf, variable_lengths
from .why_a_cache import cache_reuse
from .empty_cache import empty_cache_story
from .memory_that_grows import growing_loop
from .paged_kv_cache import kv_contiguous, kv_paged
from .allocation_order import allocation_order
from .pools_and_graphs import graph_capture_order
from .serving_memory import graph_pool_outputs
from .streams import record_stream_pending
from .memory_beyond_the_gpu import offload_activations

__all__ = ["Scenario", "SCENARIOS", "DEFAULT_BUDGET", "by_name", "run_simulated", "run_on_cuda",
           "selftest", "exit_status"]

DEFAULT_BUDGET = 2 * 1024**3
MIN_BUDGET = 512 * 1024**2      # below this the scaled workloads stop telling their stories
_MARK = "GPUMEMLAB-SELFTEST-RESULT "       # the worker's result line on stdout
_CHILD_TIMEOUT_S = 120


@dataclass(frozen=True)
class Scenario:
    """One lesson experiment: ``run(gpu, **kwargs)`` under ``alloc_conf`` (a string, or a
    function of the device's size), with the lesson's claims about it."""
    name: str
    lesson: str
    run: Callable
    alloc_conf: object = ""
    expect_oom: bool | None = None
    check: Callable | None = None            # record -> list of problems
    kwargs: dict = field(default_factory=dict)

    def conf(self, total_memory: int) -> str:
        return self.alloc_conf(total_memory) if callable(self.alloc_conf) else self.alloc_conf

    def on(self, gpu):
        return self.run(gpu, **self.kwargs)

    def story(self, rec) -> list:
        """What the lesson says about this run that the record contradicts ([] = all holds)."""
        problems = []
        if self.expect_oom is not None and (rec.oom is not None) != self.expect_oom:
            problems.append(f"the lesson expects {'an OOM' if self.expect_oom else 'no OOM'}, "
                            f"the run had {'one' if rec.oom else 'none'}")
        if self.check is not None:
            problems += self.check(rec)
        return problems


def _want(label, ok):
    return [] if ok else [label]


def _reserved_after_empty_cache(rec):
    after, chunk = rec.notes["reserved_after_empty_cache"], rec.notes["chunk"]
    return _want(f"reserved after the three empty_cache() calls: {after}, the lesson says "
                 f"[0, 2 MiB, the fragmented segment's {14 * chunk}]",
                 after == [0, 2 * 1024 * 1024, 14 * chunk])


def _grows_by_one_output(rec):
    """Lesson 10: a kept output adds its rounded size every step; a freed one adds nothing."""
    after, out = rec.notes["allocated_after_step"], rec.notes["output_bytes"]
    per_step = -(-out // 512) * 512 if rec.notes["keep_outputs"] else 0
    growth = [b - a for a, b in zip(after, after[1:])]
    return _want(f"allocated grew by {growth} a step, the lesson says {per_step} every step",
                 growth == [per_step] * len(growth))


def _kept_outputs_grow_the_pool(rec):
    """Lesson 15: outputs kept alive make the shared graph pool reserve more than weak references."""
    weak, kept = rec.notes["pool_reserved"]
    return _want(f"the shared pool reserved {weak} bytes with outputs released and {kept} with "
                 f"outputs kept; the lesson says keeping them needs more", 0 < weak < kept)


def _big_first_reserves_more(rec):
    """Lesson 12: the same three tensors reserve more allocated big first than big last."""
    big_first, big_last = rec.notes["reserved"]
    return _want(f"12, 4 and 4 MiB reserved {big_first} bytes big first and {big_last} big last; "
                 f"the lesson says big first needs more", big_first > big_last > 0)


def _largest_first_reserves_least(rec):
    """Lesson 13: captured largest batch first, the shared pool reserves less than smallest first."""
    largest_first, smallest_first = rec.notes["pool_reserved"]
    return _want(f"the shared pool reserved {largest_first} bytes captured largest first and "
                 f"{smallest_first} smallest first; the lesson says largest first needs less",
                 0 < largest_first < smallest_first)


SCENARIOS = [
    Scenario("cache_reuse", "01", cache_reuse, expect_oom=False,
             check=lambda r: _want("segments were allocated after the first step",
                                   r.stats["num_device_alloc"] == len(r.notes["sizes"]))),
    Scenario("fragmentation_oom", "02", S.fragmentation_oom, expect_oom=True,
             check=lambda r: _want("the OOM came with less free memory than requested",
                                   r.free_at_oom is not None and r.free_at_oom > r.oom_request)),
    Scenario("train_step_like", "03", S.train_step_like, expect_oom=False),
    Scenario("empty_cache", "04", empty_cache_story, expect_oom=True,
             check=_reserved_after_empty_cache),
    Scenario("max_split_size_off", "05", big_then_small, expect_oom=True),
    Scenario("max_split_size_on", "05", big_then_small, max_split_conf, expect_oom=False),
    Scenario("garbage_collection_off", "05", growing, expect_oom=False,
             check=lambda r: _want("no OOM-path retries without garbage collection",
                                   r.stats["num_alloc_retries"] > 0)),
    Scenario("garbage_collection_on", "05", growing, "garbage_collection_threshold:0.6",
             expect_oom=False,
             check=lambda r: _want("OOM-path retries despite garbage collection",
                                   r.stats["num_alloc_retries"] == 0)),
    Scenario("roundup_power2_off", "05", variable_lengths, expect_oom=False),
    Scenario("roundup_power2_on", "05", variable_lengths, "roundup_power2_divisions:4",
             expect_oom=False),
    Scenario("expandable_segments", "06", S.fragmentation_oom, "expandable_segments:True",
             expect_oom=False),
    Scenario("activations", "07", activations, expect_oom=True),
    Scenario("activations_checkpointed", "07", activations, expect_oom=False,
             kwargs={"checkpoint": True}),
    Scenario("kv_contiguous", "08", kv_contiguous, expect_oom=True),
    Scenario("kv_paged", "08", kv_paged, expect_oom=False),
    Scenario("batch_growth", "09", S.batch_growth, expect_oom=True),
    Scenario("growing_loop_kept", "10", growing_loop, expect_oom=False,
             check=lambda r: _grows_by_one_output(r)),
    Scenario("growing_loop_fixed", "10", growing_loop, expect_oom=False,
             kwargs={"keep_outputs": False}, check=lambda r: _grows_by_one_output(r)),
    Scenario("allocation_order", "12", allocation_order, expect_oom=False,
             check=_big_first_reserves_more),
    Scenario("graph_capture_order", "13", graph_capture_order, expect_oom=False,
             check=_largest_first_reserves_least),
    Scenario("record_stream_pending", "14", record_stream_pending, expect_oom=False,
             check=lambda r: _want("a block pending on a busy stream was reused, or a free one "
                                   "after the synchronize was not",
                                   not r.notes["reused_while_busy"]
                                   and r.notes["reused_after_sync"])),
    Scenario("graph_pool_outputs", "15", graph_pool_outputs, expect_oom=False,
             check=_kept_outputs_grow_the_pool),
    Scenario("offload_activations", "17", offload_activations, expect_oom=False,
             check=lambda r: _want("an offloaded activation left more than one on the device",
                                   len({s["reserved"] for s in r.steps}) == 1)),
]


def by_name(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise KeyError(f"no scenario {name!r}; there are: {', '.join(s.name for s in SCENARIOS)}")


def run_simulated(scenario: Scenario, budget: int = DEFAULT_BUDGET):
    """The model's prediction: the scenario on a fresh SimulatedGPU of ``budget`` bytes."""
    from gpumemlab.devices.simulated import SimulatedGPU
    gpu = SimulatedGPU(budget, alloc_conf=scenario.conf(budget), record_frames=False)
    return scenario.on(gpu)


def run_on_cuda(scenario: Scenario, budget: int = DEFAULT_BUDGET, *, snapshot_path=None,
                device: str = "cuda", timeout_s: float = _CHILD_TIMEOUT_S) -> dict:
    """The measurement: the scenario in a fresh child process on a CudaGPU of ``budget`` (its
    settings in ``PYTORCH_CUDA_ALLOC_CONF``, read at start-up as PyTorch does). Returns the
    child's :func:`~gpumemlab.devices.compare.summary`; a child that failed, hung or died gives a
    summary with no steps and ``error`` set. ``device="sim"`` runs the same child on the model
    (to test this path without a GPU)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "GPUMEMLAB_DEVICE")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTORCH_CUDA_ALLOC_CONF"] = scenario.conf(budget)
    cmd = [sys.executable, "-m", "gpumemlab.lessons.selftest_worker", scenario.name,
           str(budget), "--device", device]
    if snapshot_path is not None:
        cmd += ["--snapshot", str(snapshot_path)]
    empty = {"name": scenario.name, "steps": [], "oom_step": None, "segments": [], "stats": {}}
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return dict(empty, error=f"the child process ran past {timeout_s:.0f} s and was stopped")
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return dict(empty, error=f"the child process exited with status {done.returncode}: {tail}")


def _torch_version() -> str:
    try:
        import torch
    except Exception as exc:
        return f"not importable ({type(exc).__name__})"
    return str(torch.__version__)


def _cuda_name(budget) -> str:
    import torch
    props = torch.cuda.get_device_properties(0)
    return (f"{props.name} (cuda:0, {format_size(int(props.total_memory))}), "
            f"budget {format_size(budget)} per scenario")


def selftest(device: str = "sim", budget=DEFAULT_BUDGET, names=None, *, measure=None) -> dict:
    """Run the scenarios; return the report (the JSON ``gpumemlab selftest --json`` prints).

    ``device`` "sim": the model only (``cuda`` false, nothing compared); "cuda": also on the
    card, each compared. ``measure(scenario, budget)`` replaces :func:`run_on_cuda` (tests).
    """
    if device not in ("sim", "cuda"):
        raise ValueError(f"device must be 'sim' or 'cuda', not {device!r}")
    budget = parse_size(budget, name="budget")
    if budget < MIN_BUDGET:
        raise ValueError(f"a selftest budget of {format_size(budget)} is too small: the "
                         f"scenarios need at least {format_size(MIN_BUDGET)}")
    chosen = SCENARIOS if names is None else [by_name(n) for n in names]
    cuda = device == "cuda"
    measure = measure or run_on_cuda
    report = {"cuda": cuda,
              "device": _cuda_name(budget) if cuda and measure is run_on_cuda else
              (f"measured by {getattr(measure, '__name__', 'a test double')}" if cuda else
               f"simulated ({format_size(budget)} per scenario, no real GPU memory)"),
              "torch": _torch_version(), "scenarios": []}
    for sc in chosen:
        diffs, predicted = [], None
        try:
            rec = run_simulated(sc, budget)
            predicted = summary(rec)
            diffs += [f"simulator: {p}" for p in sc.story(rec)]
            simulated_ok = not diffs
        except Exception as exc:          # a bug in the model must not hide the other scenarios
            diffs.append(f"simulator: {type(exc).__name__}: {exc}")
            simulated_ok = False
        entry = {"name": sc.name, "simulated_ok": simulated_ok, "compared": False,
                 "equal": None, "differences": diffs}
        if cuda:
            measured = measure(sc, budget)
            found = compare(predicted, measured) if predicted is not None else \
                [f"GPU: {measured.get('error') or 'ran, but there is no prediction to compare'}"]
            entry.update(compared=True, equal=not found)
            diffs += found
        report["scenarios"].append(entry)
    return report


def exit_status(report: dict) -> int:
    """0 when every scenario ran on the simulator as the lesson says and every compared one is
    equal; 1 otherwise."""
    ok = all(s["simulated_ok"] for s in report["scenarios"])
    ok = ok and all(s["equal"] for s in report["scenarios"] if s["compared"])
    return 0 if ok else 1

"""Lesson 05, allocator settings: its exercise (the largest ``max_split_size_mb`` under which a
workload fits an 8 GiB card) and its selftest workloads: ``big_then_small`` (a big cached block nibbled by small
tensors, then the big request again: with ``max_split_size_mb`` the big block is oversize and is
not split), ``growing`` (tensors that grow each step under a memory fraction; with
``garbage_collection_threshold`` old cache goes before the limit) and ``variable_lengths``
(seeded sequence lengths; the setting to try is ``roundup_power2_divisions``).
"""
from __future__ import annotations

import random
import re

from gpumemlab.devices.scenarios import ScenarioRun, mib_round
from gpumemlab.quizkit.exercise_base import AnswerShapeError, alloc_conf_answer, exercise
from gpumemlab.units import format_size, GiB, KiB, MiB
from gpumemlab.quizkit.predict_rules import Misconception, question


# -- 05: make a workload fit an 8 GiB card with one setting
CARD_05 = "8GiB"


def big_small_big(gpu):
    """Lesson 05's exercise workload: a 6 GiB tensor dies, four 200 MiB tensors arrive, then
    6 GiB is needed again. Returns the live allocations (keep them to keep the state)."""
    x = gpu.empty(6 * GiB)
    del x
    live = [gpu.empty(200 * MiB) for _ in range(4)]
    live.append(gpu.empty(6 * GiB))
    return live


def oom_line(exc) -> str:
    """The OOM message up to its advice: what was asked and what was free and cached."""
    text = str(exc).splitlines()[0]
    return text.split(" If reserved but unallocated")[0].strip()


def run_05(conf: str):
    """(gpu, error text or None) after lesson 05's workload under ``conf``."""
    from gpumemlab.devices.errors import OutOfMemoryError
    from gpumemlab.devices.simulated import SimulatedGPU

    gpu = SimulatedGPU(CARD_05, alloc_conf=conf)
    try:
        big_small_big(gpu)
    except OutOfMemoryError as exc:
        return gpu, oom_line(exc)
    return gpu, None


def _max_split_answer(answer) -> int:
    """``answer`` as the N of one ``max_split_size_mb:N`` setting c10 accepts."""
    conf = alloc_conf_answer(answer)
    found = re.fullmatch(r"\s*max_split_size_mb\s*:\s*(\d+)\s*", conf)
    if not found:
        raise AnswerShapeError(f"the task asks for one max_split_size_mb:N setting, got {conf!r}")
    return int(found[1])


@exercise("05.ex", "the largest max_split_size_mb that makes it fit",
          "On an 8 GiB card a 6 GiB tensor dies, four 200 MiB tensors arrive, then 6 GiB is "
          "needed again (gpumemlab.lessons.allocator_settings.big_small_big). With the defaults "
          "the second 6 GiB runs out of memory; with max_split_size_mb:N it fits for some N. "
          "What is the LARGEST N (in MiB) for which it fits? Work it out from the oversize rule, "
          "then check.",
          "one setting 'max_split_size_mb:N', N a whole number of MiB",
          hints=("Look at the block map after the four 200 MiB tensors: where did they go?",
                 "max_split_size_mb:N marks cached blocks of N MiB or more as oversize: a smaller "
                 "request never splits them.",
                 "The cached 6 GiB block must stay whole for the second 6 GiB: up to which N is "
                 "it still oversize?"),
          stub="")
def _judge_05(answer):
    n = _max_split_answer(answer)
    conf = f"max_split_size_mb:{n}"
    gpu, oom = run_05(conf)
    bigger = run_05(f"max_split_size_mb:{n + 1}")[1] is None if oom is None else None
    figures = {"alloc_conf": conf, "max_split_size_mb": n, "oom": oom,
               "next_fits": bigger, "peak_reserved_bytes": gpu.max_memory_reserved()}
    if oom:
        return False, f"under {conf!r} the second 6 GiB tensor fails: {oom}", figures
    if bigger:
        return False, (f"it fits under {conf!r}, and under max_split_size_mb:{n + 1} too: a "
                       f"larger N works"), figures
    return True, (f"under {conf!r} the workload fits (peak reserved "
                  f"{format_size(gpu.max_memory_reserved())} of {format_size(gpu.total_memory)}); "
                  f"under max_split_size_mb:{n + 1} the second 6 GiB fails"), figures


# -- the selftest workloads (run on the simulator and, with CUDA, on the real card)
def big_then_small(gpu, *, release: bool = True):
    """Two thirds of the device as one tensor, freed; four tensors of 1/30 each; the big
    request again. With defaults the small ones are carved from the cached block, which is then
    too short, and its segment cannot be released: OOM. ``max_split_size_mb`` of a third of
    the device (see ``max_split_conf``) keeps the big block whole."""
    run = ScenarioRun(gpu, "big_then_small")
    big = mib_round(gpu.total_memory * 2 // 3)
    small = mib_round(gpu.total_memory // 30)
    run.alloc("big", big, "a big tensor")
    run.free("big", "freed: cached")
    for i in range(4):
        run.alloc(i, small, f"small tensor {i}")
    run.alloc("again", big, "the big tensor again")
    run.rec.notes.update(big=big, small=small)
    return run.finish(release)


def max_split_conf(total_memory: int) -> str:
    """The ``max_split_size_mb`` setting ``big_then_small`` is built for: a third of the device."""
    return f"max_split_size_mb:{max(21, total_memory // 3 // MiB)}"


def growing(gpu, *, steps: int = 30, fraction: float = 0.5, release: bool = True):
    """Cap the device at ``fraction``; each step two tensors of a size that grows, freed at
    once (lesson 05's growing sequence length, scaled from its 8 GiB card)."""
    run = ScenarioRun(gpu, "growing")
    run.act(f"set_per_process_memory_fraction({fraction})", gpu.set_per_process_memory_fraction,
            fraction)
    scale = gpu.total_memory / (8 * 1024 * MiB)
    for step in range(steps):
        size = mib_round(int((200 + 60 * step) * MiB * scale))
        for i in range(2):
            run.alloc(i, size, f"step {step}: tensor {i}")
        for i in range(2):
            run.free(i, f"step {step}: tensor {i} freed")
    run.act("set_per_process_memory_fraction(1.0)", gpu.set_per_process_memory_fraction, 1.0)
    return run.finish(release)


def variable_lengths(gpu, *, count: int = 300, seed: int = 0, release: bool = True):
    """``count`` tensors of a seeded sequence length each (64 to 2048 tokens of 1/131072 of the
    device, plus up to 4 KiB); after each, if more than six are alive, a random one is freed."""
    rng = random.Random(seed)
    run = ScenarioRun(gpu, "variable_lengths")
    per_token = max(4 * KiB, gpu.total_memory // (128 * 1024) // 512 * 512)
    alive = []
    for k in range(count):
        n = rng.randint(64, 2048) * per_token + rng.randint(0, 4095)
        run.alloc(k, n, f"tensor {k}")
        alive.append(k)
        if len(alive) > 6:
            run.free(alive.pop(rng.randrange(len(alive))), "a random one freed")
    run.rec.notes.update(per_token=per_token)
    return run.finish(release)


# -- the lesson's predict questions (see why_a_cache)
question("05.p1", "choice",
         choices=("defaults only", "max_split_size_mb:512 only", "both", "neither"),
         misconceptions=(
             Misconception("max_split_size_mb:512 only", "It is the other way round: with the "
                           "defaults `should_split` lets the small tensors carve up the cached "
                           "1 GiB block; max_split_size_mb:512 keeps blocks above 512 MiB whole, "
                           "so the second 1 GiB finds one."),
             Misconception("neither", "With the defaults the small tensors split the cached "
                           "1 GiB block (`should_split`), so no free block is large enough for "
                           "the second 1 GiB, and the driver has no room for a new one."),
         ))
question("05.p2", "number", unit="retries")
question("05.p3", "choice", choices=("lower", "the same", "higher"), misconceptions=(
    Misconception("higher", "Each block does waste more to rounding, but with fewer distinct "
                  "sizes a freed block fits the next request, so fewer new segments are made: "
                  "here the reuse outweighs the waste."),
))

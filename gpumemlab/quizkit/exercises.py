"""Code exercises: a learner's function, tested against the real allocator model.

Each exercise has a signature, the cases it is tested on (edges plus seeded random sizes; the
classroom grader adds cases from a fresh random generator per run), and a
reference that asks the model itself: ``round_size`` and ``segment_size`` call the allocator's own
size functions; ``should_split`` is decided by running the simulated GPU and looking whether the
block was split in the snapshot; ``fragmentation`` reads a snapshot the simulator produced. So a
correct answer is "behaves like PyTorch's allocator", never "matches a hard-coded table".
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..allocator.rounding import get_allocation_size, round_size
from ..units import KiB, MiB
from .compute import inactive_blocks, run_ops


@dataclass(frozen=True)
class Exercise:
    name: str
    signature: str
    cases: object        # () -> list of argument tuples
    reference: object    # (*args) -> expected value
    compare: object = None  # (got, expected) -> bool; default ==
    # Kit modules that compute the answer: the classroom sandbox withholds them from students.
    withholds: tuple = ()


def _size_cases(rng=None):
    rng = rng or random.Random(0)
    edges = [0, 1, 511, 512, 513, 1023, 1024, 1025, KiB * 4 + 1, MiB - 1, MiB, MiB + 1,
             10 * MiB - 1, 10 * MiB, 10 * MiB + 1, 20 * MiB + 3, 100 * MiB + 1]
    return [(n,) for n in edges + [rng.randint(1, 200 * MiB) for _ in range(40)]]


def _round_size(size):

    return round_size(size)


def _segment_size(size):

    return get_allocation_size(round_size(size))


def _split_cases(rng=None):
    rng = rng or random.Random(1)
    cases = [(2 * MiB, 512, True), (2 * MiB, MiB - 512, True), (2 * MiB, MiB, True),
             (20 * MiB, 19 * MiB, False), (20 * MiB, 19 * MiB - 512, False),
             (20 * MiB, 2 * MiB, False), (12 * MiB, 11 * MiB, False), (12 * MiB, 10 * MiB, False)]
    for _ in range(20):
        if rng.random() < 0.4:
            cases.append((2 * MiB, 512 * rng.randint(1, 2048), True))
        else:
            block = rng.choice((20 * MiB, rng.randint(5, 30) * 2 * MiB))
            size = 512 * rng.randint(2049, block // 512)
            cases.append((block, size, False))
    return cases


def _should_split(block_size, size, small):
    """Ask the model: cache a free block of ``block_size``, request ``size``, count the blocks."""

    # A small request that needs a fresh segment always gets 2 MiB; a large one gets a segment of
    # exactly block_size when block_size is one the allocator itself would cudaMalloc.
    ops = [f"x = {block_size}", "del x", f"y = {size}"] if not small else [f"y = {size}"]
    outcome = run_ops(ops, "1GiB")   # keep it: its live allocations die with it
    seg = next(s for s in outcome.gpu.snapshot()["segments"] if s["total_size"] == block_size)
    return len(seg["blocks"]) > 1


def _snapshot_after(ops):

    outcome = run_ops(ops)   # holding the outcome keeps its allocations alive
    return outcome.gpu.snapshot()


def _frag_cases(rng=None):
    rng = rng or random.Random(2)
    snaps = [_snapshot_after([]), _snapshot_after(["a = 1", "b = 1", "del a"])]
    for _ in range(8):
        ops, live = [], []
        for i in range(rng.randint(2, 7)):
            ops.append(f"t{i} = {rng.choice((1, 300 * KiB, 3 * MiB, 12 * MiB, 25 * MiB))}")
            live.append(f"t{i}")
            if rng.random() < 0.5:
                ops.append(f"del {live.pop(rng.randrange(len(live)))}")
        snaps.append(_snapshot_after(ops))
    return [(s,) for s in snaps]


def _fragmentation(snapshot):
    """1 - largest free block / all free bytes, over cached free blocks; 0.0 if none is free."""

    free = inactive_blocks(snapshot)
    return 0.0 if not free or sum(free) == 0 else 1 - max(free) / sum(free)


def _close(got, expected):
    return isinstance(got, (int, float)) and not isinstance(got, bool) \
        and abs(got - expected) <= 1e-9


_SIZE_RULES = ("allocator/rounding.py", "viz/size_rules.py")
EXERCISES = {
    "round_size": Exercise("round_size", "round_size(size: int) -> int", _size_cases,
                           _round_size, withholds=_SIZE_RULES),
    "segment_size": Exercise("segment_size", "segment_size(size: int) -> int", _size_cases,
                             _segment_size, withholds=_SIZE_RULES),
    "should_split": Exercise("should_split",
                             "should_split(block_size: int, size: int, small: bool) -> bool",
                             _split_cases, _should_split, withholds=("allocator",)),
    "fragmentation": Exercise("fragmentation", "fragmentation(snapshot: dict) -> float",
                              _frag_cases, _fragmentation, _close,
                              withholds=("viz/metrics.py",)),
}


def _equal(got, want) -> bool:
    # A bool answer must be a bool-like; an int answer must not be a bool (True == 1 in Python).
    if isinstance(want, bool):
        return isinstance(got, (bool, int)) and got == want
    return not isinstance(got, bool) and isinstance(got, (int, float)) and got == want


def agrees(ex: Exercise, got, expected) -> bool:
    """Whether one returned value is right (the classroom grader judges probe outputs by it)."""
    return (ex.compare or _equal)(got, expected)


def show_args(args):
    return ", ".join("<snapshot>" if isinstance(a, dict) else repr(a) for a in args)


def run_exercise(name: str, fn) -> tuple:
    """-> (passed, cases_passed, cases_total, message). Stops at the first failing case."""
    ex = EXERCISES[name]
    if not callable(fn):
        return False, 0, 0, f"expected a function {ex.signature}, got {type(fn).__name__}"
    cases = ex.cases()
    for i, args in enumerate(cases):
        expected = ex.reference(*args)
        try:
            got = fn(*args)
        except Exception as exc:  # the learner's code: report, never crash the checker
            return False, i, len(cases), (f"{ex.name}({show_args(args)}) raised "
                                          f"{type(exc).__name__}: {exc}")
        if not agrees(ex, got, expected):
            return False, i, len(cases), (f"{ex.name}({show_args(args)}) returned {got!r}; "
                                          f"the allocator gives {expected!r}")
    return True, len(cases), len(cases), f"all {len(cases)} cases agree with the allocator"

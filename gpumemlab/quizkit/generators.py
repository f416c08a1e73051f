"""Predict-the-allocator questions: seeded allocation sequences whose answer the simulator computes.

A generator turns ``(seed, params)`` into a ``Variant``: the ops a learner reads, what is asked,
and in what unit. The expected answer is never stored: ``Variant.answer()`` runs the ops on a fresh
``SimulatedGPU``. A learner's seed (see ``progress.learner_seed``) mixed with the question id picks
the variant, so two learners usually see different numbers, and one learner always sees the same.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..units import KiB, MiB
from .compute import measure, run_ops


@dataclass(frozen=True)
class Variant:
    ops: tuple
    question: str
    measure: str
    unit: str               # "MiB", "bytes", "count" or "yes/no"
    total_memory: str = "24GiB"
    alloc_conf: str = ""

    def answer(self):

        value = measure(run_ops(self.ops, self.total_memory, self.alloc_conf), self.measure)
        if self.unit == "yes/no":
            return "yes" if value else "no"
        if self.unit == "MiB":
            return value / MiB
        return value

    def text(self) -> str:
        setup = f"gpu = SimulatedGPU(total_memory={self.total_memory!r}"
        setup += f", alloc_conf={self.alloc_conf!r})" if self.alloc_conf else ")"
        lines = [setup] + [_pretty(op) for op in self.ops]
        body = "\n".join("    " + line for line in lines)
        return f"{body}\n{self.question} (answer in {self.unit})"


def _pretty(op: str) -> str:
    if "=" in op:
        name, size = (s.strip() for s in op.split("=", 1))
        stream = ""
        if "@" in size:
            size, s = (x.strip() for x in size.split("@"))
            stream = f", stream={s}"
        return f"{name} = gpu.empty({_size_literal(size)}{stream})"
    if op.strip().startswith("empty_cache"):
        return "gpu.empty_cache()"
    return op.strip()


def _size_literal(size: str) -> str:
    for unit in ("KiB", "MiB", "GiB"):
        if size.endswith(unit):
            return f"{size[:-3]} * {unit}"
    return size


def _fmt(nbytes: int) -> str:
    """Write a size the way the ops language reads it, in the largest exact unit."""
    for unit, factor in (("MiB", MiB), ("KiB", KiB)):
        if nbytes % factor == 0:
            return f"{nbytes // factor}{unit}"
    return str(nbytes)


REGIMES = ("small", "mid", "large")


def _size(rng: random.Random, regimes=REGIMES) -> int:
    """A request from one of the three regimes the allocator treats differently."""
    regime = rng.choice(regimes)
    if regime == "small":
        return rng.choice((1, 100, 513, 4 * KiB, 300 * KiB, 1 * MiB))
    if regime == "mid":
        return rng.randint(2, 18) * MiB // 2
    return rng.randint(11, 40) * MiB


def _sequence(rng: random.Random, n: int, regimes=REGIMES):
    ops, live = [], []
    for i in range(n):
        name = "abcdefgh"[i]
        ops.append(f"{name} = {_fmt(_size(rng, regimes))}")
        live.append(name)
        if len(live) > 1 and rng.random() < 0.4:
            victim = live.pop(rng.randrange(len(live) - 1))
            ops.append(f"del {victim}")
    return ops


def reserved_after(rng, params):
    ops = _sequence(rng, params.get("steps") or rng.randint(5, 8))
    return Variant(tuple(ops), "How much memory is reserved now?", "memory_reserved", "MiB")


def segments_after(rng, params):
    ops = _sequence(rng, params.get("steps") or rng.randint(5, 8))
    return Variant(tuple(ops), "How many segments has the allocator cudaMalloc'd and kept?",
                   "segments", "count")


def largest_free(rng, params):
    # large requests three times as often: a freed 20 MiB segment of mid-sized tensors was the answer
    # of one variant in nine, too often for a per-student variant (quizkit.answer_space)
    ops = _sequence(rng, params.get("steps") or rng.randint(6, 8),
                    ("small", "mid", "large", "large", "large"))
    if not any(op.startswith("del") for op in ops):
        ops.append("del a")
    return Variant(tuple(ops), "What is the largest cached free block?", "largest_free", "MiB")


def reuse(rng, params):
    """Free a block, then ask whether a new request lands at its old address."""
    first = _size(rng)
    other = _size(rng)
    again = rng.choice((first, _size(rng), max(first // 2, 1), first + MiB))
    ops = [f"a = {_fmt(first)}", f"b = {_fmt(other)}", "del a", f"c = {_fmt(again)}"]
    if rng.random() < 0.25:
        ops[-1] += " @1"   # another stream never reuses stream 0's cached block
    return ReuseVariant(tuple(ops), "Does c start at the address that a had?", "reuse", "yes/no")


@dataclass(frozen=True)
class ReuseVariant(Variant):
    def answer(self):

        # a's address is read from a run that stops before the free; the full run gives c's.
        a_address = run_ops(self.ops[:2], self.total_memory, self.alloc_conf).names["a"].address
        c = run_ops(self.ops, self.total_memory, self.alloc_conf).names.get("c")
        return "yes" if c is not None and c.address == a_address else "no"


def fragmented_oom(rng, params):
    """Carve a cached segment into pieces, free every other one, then ask for a bigger block."""
    piece = rng.randint(6, 12) * 2 * MiB
    count = rng.choice((4, 5, 6))
    slack = rng.choice((2, 8, 30)) * MiB
    total = piece * count + slack
    ops = [f"x = {_fmt(piece * count)}", "del x"]
    names = [f"p{i}" for i in range(count)]
    ops += [f"{n} = {_fmt(piece)}" for n in names]
    ops += [f"del {n}" for n in names[::2]]
    want = rng.choice((piece, piece + 2 * MiB, 2 * piece))
    ops.append(f"big = {_fmt(want)}")
    return Variant(tuple(ops), "Does the last request (big) raise OutOfMemoryError?", "oom",
                   "yes/no", total_memory=_fmt(total))


GENERATORS = {
    "reserved_after": reserved_after,
    "segments_after": segments_after,
    "largest_free": largest_free,
    "reuse": reuse,
    "fragmented_oom": fragmented_oom,
}


def make_variant(question, seed) -> Variant:
    """The variant of a predict ``question`` that learner ``seed`` sees."""
    rng = random.Random(f"{seed}:{question.id}")
    return GENERATORS[question.data["generator"]](rng, question.data.get("params", {}))

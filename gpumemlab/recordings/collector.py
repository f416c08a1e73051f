"""Reading a snapshot with the cyclic garbage collector paused.

A snapshot is millions of fresh dicts and lists without a single reference cycle, yet every
generation-0 overflow during unpickling and normalising made the collector walk the growing heap
again. Paused, a big snapshot with frames loads markedly faster (benchmarks/bench_doctor.py
prints the ratio); the collector's previous state is restored afterwards, even on an error.
"""
from __future__ import annotations

import functools
import gc

__all__ = ["gc_paused", "collector_paused"]


class gc_paused:
    """``with gc_paused():`` the collector is off inside, back to what it was after."""

    def __enter__(self):
        self.was_enabled = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc):
        if self.was_enabled:
            gc.enable()
        return False


def collector_paused(fn):
    """Decorate a reader so that it runs under :class:`gc_paused`."""
    @functools.wraps(fn)
    def read(*args, **kwargs):
        with gc_paused():
            return fn(*args, **kwargs)
    return read

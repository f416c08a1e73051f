"""Bulk work with the cyclic garbage collector paused.

Loading, normalising and replaying a big snapshot create millions of fresh dicts, lists and
model objects without a single reference cycle that live until the work ends, yet every
generation-0 overflow made the collector walk the growing heap again (a 2M-entry recording: most
of its load time; benchmarks/bench_doctor.py prints the ratio). Paused, the collector's previous
state comes back afterwards, even on an error, so any garbage cycle made meanwhile is collected
then: nothing leaks.
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
    """Decorate ``fn`` so that it runs under :class:`gc_paused` (looked up at each call, so a
    benchmark can put a no-op in its place to time the work with the collector running)."""
    @functools.wraps(fn)
    def paused(*args, **kwargs):
        with gc_paused():
            return fn(*args, **kwargs)
    return paused

"""Bulk work with the cycle collector paused: replaying (and loading) a big recording creates
millions of objects that live until the work ends, and each full collection would walk all of
them (a 2M-entry recording: most of its load time). Collections resume when the work ends, so
any garbage cycle made meanwhile is collected then: nothing leaks.
"""
from __future__ import annotations

import functools
import gc


def gc_paused(fn):
    """Decorate ``fn`` so that it runs with ``gc`` disabled (re-enabled after, if it was)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()
    return wrapper

"""Unpickling an untrusted snapshot with no globals and bounded memory and time.

A snapshot from ``torch.cuda.memory._dump_snapshot`` holds only dicts, lists, tuples, strings,
numbers, booleans and None, so every global (class, function, module) is refused: a crafted
pickle can never run code. Memory is bounded too. CPython's C unpickler grows its memo array to
the largest memo index it is given, so a 24-byte pickle that stores into memo slot 2**27 takes
2 GiB; files up to ``CHECKED_BYTES`` therefore go through the pure-Python unpickler, whose memo
is a dict and whose reads never allocate more than the bytes left, with every memo index checked
against the file's size (a legitimate pickle numbers its memo entries from 0, one per object, so
no index exceeds the file length). Bigger files, where the C unpickler's speed matters (5-10x),
are read by it under a temporary address-space limit (``RLIMIT_AS``) of what the process uses
plus ``GROWTH`` bytes per file byte: a crafted file fails with ``MemoryError`` instead of taking
the machine's memory. Time is linear in the file in both cases.
"""
from __future__ import annotations

import io
import os
import pickle

CHECKED_BYTES = 1024**2   # the checked unpickler is 5-10x slower: at most ~0.3 s here
GROWTH = 64   # bytes of memory a legitimate snapshot needs per byte of pickle, generously


class Refused(pickle.UnpicklingError):
    """The pickle asked for something a snapshot never contains."""


class NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickler that refuses every global: no class, function or module can be reached."""

    def find_class(self, module, name):
        raise Refused(
            f"it refers to the Python object {module}.{name}, and a memory snapshot never does "
            f"(refused: loading it could run code)")

    def persistent_load(self, pid):
        raise Refused("it uses persistent ids, which a memory snapshot never does")


class CheckedUnpickler(pickle._Unpickler):
    """The pure-Python unpickler, refusing globals, with memo indices checked against the file."""

    find_class = NoGlobalsUnpickler.find_class
    persistent_load = NoGlobalsUnpickler.persistent_load
    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self._limit = len(data)

    def _memo_put(self, index: int):
        if index < 0 or index > self._limit:
            raise Refused(f"memo index {index} is larger than the file ({self._limit} bytes): "
                          f"a crafted pickle")
        self.memo[index] = self.stack[-1]

    def load_put(self):
        self._memo_put(int(self.readline()[:-1]))

    def load_binput(self):
        self._memo_put(self.read(1)[0])

    def load_long_binput(self):
        self._memo_put(int.from_bytes(self.read(4), "little"))

    dispatch[pickle.PUT[0]] = load_put
    dispatch[pickle.BINPUT[0]] = load_binput
    dispatch[pickle.LONG_BINPUT[0]] = load_long_binput


def bounded_load(data: bytes):
    """Unpickle ``data`` (no globals; memory proportional to its length)."""
    try:
        import resource
    except ImportError:   # no rlimits here: the checked unpickler for every size
        resource = None
    if len(data) <= CHECKED_BYTES or resource is None:
        return CheckedUnpickler(data).load()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    try:
        with open("/proc/self/statm") as f:
            in_use = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return CheckedUnpickler(data).load()
    cap = in_use + GROWTH * len(data) + (512 << 20)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:   # already tighter: keep it
        return NoGlobalsUnpickler(io.BytesIO(data)).load()
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        return NoGlobalsUnpickler(io.BytesIO(data)).load()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

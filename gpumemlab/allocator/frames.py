"""The Python frames recorded with an allocation (c10's ``GatheredContext``, a
``CapturedTraceback`` of Python frames only), kept compactly until a snapshot asks for them.

:func:`capture` walks the caller's frames with ``sys._getframe`` (no file system, no source
lines) and returns one flat tuple ``(code, line, code, line, ...)``, innermost first, shared by
every capture with the same call stack (interned by the frames' code objects and line numbers).
It is a plain tuple of objects the garbage collector does not track (code objects, ints), so a
history entry holding it is untracked too and long histories add nothing to collections. A
snapshot turns it into PyTorch's frame dicts ``{"filename", "line", "name"}`` with
:func:`frame_dicts`, new objects each time, so editing one snapshot changes nothing else; or,
within one snapshot, with a :class:`SharedFrames`, which shares them as PyTorch's
``py_symbolize`` (torch/csrc/profiler/python/combined_traceback.cpp) does: one dict per distinct
frame and one list per distinct captured stack, so a dumped file has a real file's shape.
"""
from __future__ import annotations

import sys
from types import CodeType

_CACHE_LIMIT = 50_000  # entries per cache before it is emptied (bounds memory, loses sharing)
_code_outside: dict = {}  # id(code) -> (code, skip_prefix, bool: the code is outside it)
_stacks: dict = {}  # (id(code), line, ...) -> captured frames holding those codes (ids stay unique)


def is_captured(context) -> bool:
    """Whether ``context`` is what :func:`capture` returns (not a list of frame dicts)."""
    return type(context) is tuple and bool(context) and type(context[0]) is CodeType


def frame_dicts(context) -> list:
    """``context`` (captured frames, or a list of frame dicts as replay and tests pass) as a new
    list of new frame dicts."""
    if not context:
        return []
    if is_captured(context):
        return [{"filename": context[i].co_filename, "line": context[i + 1],
                 "name": context[i].co_name} for i in range(0, len(context), 2)]
    return [dict(f) if isinstance(f, dict) else f for f in context]


class SharedFrames:
    """``frame_dicts`` for one snapshot, sharing as PyTorch's ``py_symbolize`` does: the same
    context (a captured stack is interned, like c10's ``CapturedTraceback`` pointer, and a
    recorded list of frame dicts is one object) gives the same list, and equal frames the same
    dict. Live only while one snapshot is built: it holds the contexts it has seen."""

    def __init__(self):
        self._lists: dict = {}   # id(context) -> (context, its frame list)
        self._frames: dict = {}  # (filename, line, name) -> the one dict for that frame

    def __call__(self, context) -> list:
        if not context:
            return []
        known = self._lists.get(id(context))
        if known is not None and known[0] is context:
            return known[1]
        if is_captured(context):
            frames = [self._frame(context[i].co_filename, context[i + 1], context[i].co_name)
                      for i in range(0, len(context), 2)]
        else:
            frames = [self._frame(f["filename"], f["line"], f["name"])
                      if type(f) is dict and len(f) == 3 and _plain(f) else
                      (dict(f) if isinstance(f, dict) else f) for f in context]
        self._lists[id(context)] = (context, frames)
        return frames

    def _frame(self, filename, line, name) -> dict:
        key = (filename, line, name)
        frame = self._frames.get(key)
        if frame is None:
            frame = self._frames[key] = {"filename": filename, "line": line, "name": name}
        return frame


def _plain(frame: dict) -> bool:
    """A frame of exactly PyTorch's three keys with hashable values (others are copied)."""
    try:
        hash((frame["filename"], frame["line"], frame["name"]))
    except (KeyError, TypeError):
        return False
    return True


def _outside(code, skip_prefix: str) -> bool:
    if len(_code_outside) >= _CACHE_LIMIT:
        _code_outside.clear()
    outside = not code.co_filename.startswith(skip_prefix)
    _code_outside[id(code)] = (code, skip_prefix, outside)
    return outside


def capture(skip_prefix: str, limit: int = 12) -> tuple:
    """The caller's frames outside ``skip_prefix`` (a directory), innermost first: at most
    ``limit`` of them, found among the ``limit + 8`` innermost frames counted from this
    function's own (as ``traceback.extract_stack(limit=limit + 8)`` called here would)."""
    f = sys._getframe()
    key = []
    kept = 0
    window = limit + 8
    lookup = _code_outside.get
    while f is not None and window:
        code = f.f_code
        known = lookup(id(code))
        if known is not None and known[0] is code and known[1] is skip_prefix:
            outside = known[2]
        else:
            outside = _outside(code, skip_prefix)
        if outside:
            key.append(id(code))
            key.append(f.f_lineno or 0)
            kept += 1
            if kept == limit:
                break
        f = f.f_back
        window -= 1
    key = tuple(key)
    frames = _stacks.get(key)
    if frames is None:
        frames = _intern(key, skip_prefix, limit)
    return frames


def _intern(key: tuple, skip_prefix: str, limit: int) -> tuple:
    # Walk again (same frames, same lines: we are still inside the capturing call) to take the
    # code objects themselves; the tuple holds them, so their ids in `key` cannot be reused.
    f = sys._getframe(1)  # capture's own frame, where its walk began
    out = []
    window = limit + 8
    while f is not None and window and len(out) < len(key):
        if not f.f_code.co_filename.startswith(skip_prefix):
            out.append(f.f_code)
            out.append(f.f_lineno or 0)
        f = f.f_back
        window -= 1
    frames = tuple(out)
    if len(_stacks) >= _CACHE_LIMIT:
        _stacks.clear()
    _stacks[key] = frames
    return frames

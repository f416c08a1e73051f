"""The Python frames recorded with an allocation (c10's ``GatheredContext``, a
``CapturedTraceback`` of Python frames only), kept compactly until a snapshot asks for them.

:func:`capture` walks the caller's frames with ``sys._getframe`` (no file system, no source
lines) and returns one flat tuple ``(code, line, code, line, ...)``, innermost first, shared by
every capture with the same call stack. The walk reads each frame's code and, for the frames
kept, the instruction offset, which key a cache; lines are computed once per distinct stack.
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
_stacks: dict = {}  # (id(code), f_lasti, ...) -> captured frames holding those codes (ids stay unique)
_stacks_by_line: dict = {}  # (id(code), line, ...) -> the same, for captures under a tracer
_distinct: dict = {}  # captured frames -> the one tuple of those frames


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


# Per skip prefix: id(code) -> code, for codes outside it and for codes inside it. A value is
# trusted only when it is the very code object (an id can be reused once a code is gone).
_classified: dict = {}  # skip_prefix -> (outside, inside)


def _classify(code, skip_prefix: str, outside: dict, inside: dict) -> bool:
    if len(outside) + len(inside) >= _CACHE_LIMIT:
        outside.clear()
        inside.clear()
    if code.co_filename.startswith(skip_prefix):
        inside[id(code)] = code
        return False
    outside[id(code)] = code
    return True


def capture(skip_prefix: str, limit: int = 12, depth: int = 0) -> tuple:
    """The caller's frames outside ``skip_prefix`` (a directory), innermost first: at most
    ``limit`` of them, found among the ``limit + 8`` innermost frames counted from this
    function's own (as ``traceback.extract_stack(limit=limit + 8)`` called here would).

    ``depth``: how many of the innermost frames, this function's own first, are known to lie
    inside ``skip_prefix`` (the kit's callers pass this one and theirs), skipped without being
    looked at; they still count in the window, so the result is the same as with ``depth=0``."""
    f = sys._getframe(depth)
    window = limit + 8 - depth
    classes = _classified.get(skip_prefix)
    if classes is None:
        classes = _classified[skip_prefix] = ({}, {})
    outside, inside = classes
    is_out = outside.get
    is_in = inside.get
    # Each kept frame is keyed by (id(code), f_lasti): the instruction offset fixes the line
    # (f_lineno is computed from it by scanning the code's line table, the costly part of a
    # walk), so lines are looked up once per distinct stack. Under a tracer (a debugger,
    # coverage) a frame's f_lineno can be the tracer's, so there lines key a cache of their own.
    untraced = sys.gettrace() is None
    stacks = _stacks if untraced else _stacks_by_line
    key = []
    append = key.append
    wanted = 2 * limit
    while f is not None and window:
        code = f.f_code
        i = id(code)
        if is_out(i) is code or (is_in(i) is not code
                                 and _classify(code, skip_prefix, outside, inside)):
            append(i)
            append(f.f_lasti if untraced else f.f_lineno)
            if len(key) == wanted:
                break
        f = f.f_back
        window -= 1
    key = tuple(key)
    frames = stacks.get(key)
    if frames is None:
        frames = _intern(key, stacks, sys._getframe(depth), limit + 8 - depth, skip_prefix)
    return frames


def _intern(key: tuple, stacks: dict, f, window: int, skip_prefix: str) -> tuple:
    # Walk the same frames again (same lines: we are still inside the capturing call) to take
    # the code objects themselves; the tuple holds them, so their ids in `key` cannot be reused.
    out = []
    while f is not None and window and len(out) < len(key):
        if not f.f_code.co_filename.startswith(skip_prefix):
            out.append(f.f_code)
            out.append(f.f_lineno or 0)
        f = f.f_back
        window -= 1
    frames = tuple(out)
    if len(stacks) >= _CACHE_LIMIT:
        stacks.clear()
        _distinct.clear()
    # Two calls on one line have different offsets but the same frames: one tuple per distinct
    # stack, as c10 shares one CapturedTraceback.
    frames = stacks[key] = _distinct.setdefault(frames, frames)
    return frames

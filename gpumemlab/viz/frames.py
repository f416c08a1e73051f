"""Which frame of a recorded stack names the code that made an allocation.

A snapshot's ``frames`` list (innermost first, as ``torch.cuda.memory._snapshot()`` stores them)
of a recording made with ``context="all"`` and C++ stacks begins with PyTorch's own machinery:
the recorder (``memory_snapshot.cpp``, ``gather_with_cpp()``, ``CapturedTraceback``), the caching
allocator, ATen/c10 operators and the Python frames of ``torch/`` itself. ``culprit_frame`` skips
all of those to the first frame of the user's code; a PyTorch Python frame comes next, and a C++
frame only when nothing else was recorded. The interpreter's own frames (CPython's ``.c`` files
such as ``Python/ceval.c``, ``<frozen importlib._bootstrap>``, ``??`` for a symbol the unwinder
could not name, and ``_PyEval_*``/``PyObject_*`` functions) are never the culprit.
"""
from __future__ import annotations

__all__ = ["culprit_frame", "frame_text", "is_pytorch_frame", "is_interpreter_frame"]

_CPP_SUFFIXES = (".cpp", ".cc", ".cu", ".h", ".hpp", ".cuh")
_RECORDER = ("memory_snapshot", "CUDACachingAllocator", "gather_with_cpp", "CapturedTraceback",
             "_record_memory_history", "record_memory_history", "_memory_viz")


def _parts(frame):
    if not isinstance(frame, dict):
        return "", ""
    return str(frame.get("filename") or ""), str(frame.get("name") or "")


_INTERPRETER_NAMES = ("_Py", "Py", "cfunction_", "method_vectorcall", "slot_tp_", "vectorcall",
                      "builtin_", "call_function", "function_code_fastcall")


def is_interpreter_frame(frame) -> bool:
    """A frame of the Python interpreter itself (CPython's C files, frozen modules, unnamed)."""
    filename, name = _parts(frame)
    if filename in ("", "??") and name in ("", "??"):
        return True
    if filename.endswith(".c") or filename.startswith("<frozen"):
        return True
    return not filename.endswith(".py") and name.startswith(_INTERPRETER_NAMES)


def is_cpp_frame(frame) -> bool:
    filename, name = _parts(frame)
    return (filename.endswith(_CPP_SUFFIXES) or filename in ("", "??")
            or "::" in name or name.startswith("_ZN"))


def is_pytorch_frame(frame) -> bool:
    """A frame of PyTorch (or of the recorder) rather than of the user's program."""
    filename, name = _parts(frame)
    path = filename.replace("\\", "/")
    if any(r in path or r in name for r in _RECORDER):
        return True
    if is_cpp_frame(frame):
        return True
    return "/torch/" in path or path.startswith("torch/") or "/site-packages/torch" in path


def culprit_frame(frames):
    """The frame that best names the allocating code: the innermost user frame, else the
    innermost PyTorch Python frame, else the innermost C++ frame outside the recorder, else
    None."""
    frames = [f for f in (frames or ()) if isinstance(f, dict) and not is_interpreter_frame(f)]
    for f in frames:
        if not is_pytorch_frame(f):
            return f
    for f in frames:
        if not is_cpp_frame(f):
            return f
    for f in frames:
        filename, name = _parts(f)
        if filename not in ("", "??") and not any(r in filename or r in name for r in _RECORDER):
            return f
    return None


def frame_text(frames) -> str:
    """``file:line name`` of :func:`culprit_frame`, or "(no frames recorded)"."""
    f = culprit_frame(frames)
    if f is None:
        return "(no frames recorded)"
    return f"{f.get('filename')}:{f.get('line')} {f.get('name')}"

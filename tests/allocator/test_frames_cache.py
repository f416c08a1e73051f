"""The frame cache of ``allocator.frames.capture``: keyed by instruction offsets, it gives the same
frames as a line-keyed walk (under a tracer, where lines key it) and one tuple per distinct stack.
(``depth`` is checked against a traceback-based oracle in test_frames.py.)"""
from __future__ import annotations

import sys

from gpumemlab.allocator import frames as fm

PREFIX = "/nonexistent-prefix/"


def _site(depth=0):
    return fm.capture(PREFIX, 12, depth)


def _lines():
    # capture, _site, _lines, _twice's comprehension, _twice: the frames below the test's own
    return [(f["name"], f["line"]) for f in fm.frame_dicts(_site())][:5]


def _twice():
    return [_lines() for _ in range(2)]


def test_a_tracer_changes_no_frame():
    plain = _twice()
    old = sys.gettrace()
    sys.settrace(lambda *a: None)
    try:
        traced = _twice()
    finally:
        sys.settrace(old)
    assert plain[0] == plain[1] == traced[0] == traced[1]
    assert [name for name, _ in plain[0]] == ["capture", "_site", "_lines", "<listcomp>", "_twice"]


def test_each_line_of_a_caller_is_its_own_frame():
    a = _site()
    b = _site()
    assert fm.frame_dicts(a)[2]["line"] + 1 == fm.frame_dicts(b)[2]["line"]  # the test's frame


def test_windows_that_keep_the_same_frames_share_one_tuple():
    # Only this file's frames differ between the two calls; with this file skipped, the kept
    # frames (pytest's) are the same, so the very same tuple comes back.
    here = __file__.rsplit("/", 1)[0] + "/"
    assert _via_a(here) is _via_b(here)


def _via_a(prefix):
    return fm.capture(prefix, 3)


def _via_b(prefix):
    return _via_a(prefix)

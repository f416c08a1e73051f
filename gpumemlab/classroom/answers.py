"""The judged answer of one test, as a short line of text for item statistics.

A plain answer comes back from the sandbox as ``{"ok": true, "value": ...}``; its value, written
as JSON, is what a teacher compares across the class ("most students wrote 2"). A function
answer (``{"calls": [...]}``) has no single value to show, and a missing or refused answer has
none either: both give "". The text came from a student, so it is cleaned (``cleantext``) and
capped at ``ANSWER_LIMIT`` characters; only the first few hundred characters of the JSON are
ever looked at, however large the value.
"""
from __future__ import annotations

import json

from gpumemlab.cleantext import clean_text

ANSWER_LIMIT = 80


def _plain(request, reply) -> bool:
    """Whether ``reply`` is a plain answer to a plain question (not a function's outputs)."""
    return (isinstance(request, dict) and request.get("probes") is None
            and isinstance(reply, dict) and reply.get("ok") is True and "value" in reply)


def _capped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def short_json(value, limit=ANSWER_LIMIT) -> str:
    """``value`` (decoded JSON) as one cleaned line of at most ``limit`` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        text = "<unreadable answer>"
    return _capped(clean_text(text[:limit * 4], keep_newlines=False), limit)


def answer_text(requests, replies, limit=ANSWER_LIMIT) -> str:
    """The plain answers the test's judges asked for, as one line ("" when there is none)."""
    if not isinstance(replies, list):
        return ""
    shown = [short_json(rep["value"], limit) for req, rep in zip(requests, replies)
             if _plain(req, rep)]
    return _capped("; ".join(shown), limit)

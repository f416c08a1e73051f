"""One cleaner for text that came from outside the kit (a student's output, a snapshot's frame
names and strings, a pasted message) before it reaches a file or a terminal.

What it does, and why:

* lone surrogates (``'\\ud800'``), which no UTF-8 file can hold, become ``\\ud800`` escapes, so
  writing them never raises ``UnicodeEncodeError`` (one student's text must not stop the rest);
* C0 and C1 control characters (ESC and the rest of the terminal escape sequences, carriage
  return, backspace, DEL) become visible ``\\x1b``-style escapes, so text cannot clear a screen or
  overwrite a line with a fake verdict; newline and tab are kept (``keep_newlines``);
* Unicode bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) and the zero-width
  line/paragraph separators become visible escapes too, so text reads in the order it is stored;
* the result is capped at ``limit`` characters, with a note of how much was cut.

It works in one pass over the text (linear time) and never raises for any ``str``.
"""
from __future__ import annotations

import re

# ranges rather than a per-character loop: one regex pass is linear and fast on megabytes
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                     "\ud800-\udfff]")
_UNSAFE_WITH_NEWLINES = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                                   "\ud800-\udfff]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def clean_text(text, *, limit: int | None = None, keep_newlines: bool = True) -> str:
    """``text`` made safe to write to a UTF-8 file or print to a terminal (see the module).

    ``limit``: at most this many characters of the cleaned text are kept; a longer text ends
    with ``... [N more characters cut]``. ``keep_newlines=False`` escapes newlines and tabs
    too (for one-line fields such as a CSV cell or a log line). A non-str is shown by ``str()``.
    """
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception as exc:  # a hostile __str__ must not stop the caller
            text = f"<unprintable {type(text).__name__}: {type(exc).__name__}>"
    pattern = _UNSAFE if keep_newlines else _UNSAFE_WITH_NEWLINES
    if limit is not None and limit >= 0 and len(text) > limit:
        # clean only what is kept: the cut is counted on the original text
        cut = len(text) - limit
        return pattern.sub(_escape, text[:limit]) + f"... [{cut:,} more characters cut]"
    return pattern.sub(_escape, text)


__all__ = ["clean_text"]

"""Clean a pasted out-of-memory text before it is read: what people's pastes do to PyTorch's message.

A message reaches the doctor through a terminal, a log file, a chat or an issue tracker, so it can
carry: markdown (``**bold**``, backticks, ``>`` quotes), log prefixes at the start of each line
(``[rank0]:``, ISO timestamps with a level, Python logging's ``ERROR:name:``, glog's
``E0501 12:00:01.123 4242 file.cpp:12]``), hard wraps anywhere (inside words and numbers too), wraps that start each line with "# ",
newlines written as the two characters ``\n`` inside another program's string,
full-width punctuation from an input method (``：`` ``（`` ``．``) and words glued to the message.
:func:`clean` undoes the markup and prefixes (Unicode NFKC folds full-width forms); the message's
patterns are then matched on the text with all whitespace removed (:func:`squash`), so wraps do
not matter. Every pattern here starts with a literal or is anchored at a line start, so cleaning
and matching take time linear in the paste's length.
"""
from __future__ import annotations

import re
import unicodedata

__all__ = ["clean", "squash", "exception_name", "MAX_NAME"]

_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_PREFIX = re.compile(
    r"(?m)^[ \t]*(?:"
    r"(?:>[ \t]?)+"                                            # markdown / mail quotes
    r"|\#{1,6}(?=[ \t]|$)"                                     # "# " wraps, markdown headings
    r"|\[(?:rank|default)\d+\]:"                               # torchrun's per-rank prefix
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[.,\d]*(?:Z|[+-]\d\d:?\d\d)?"
    r"(?:[ \t]*[-|]?[ \t]*" + _LEVEL + r")?[ \t]*[-|:]?"       # timestamps with a level
    r"|" + _LEVEL + r":[\w.]{0,80}:"                           # Python logging's basic format
    r"|[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\]\n]{0,120}\]"  # glog
    r")")
_MARKUP = str.maketrans({"*": None, "`": None, "\u200b": None, "\ufeff": None})
MAX_NAME = 80      # the longest exception name (with its module path) read before a message


# a message quoted inside another program's string keeps its newlines as the two characters "\n"
# (a Rust panic, a JSON log); before a capital or a space they are line breaks, not a Windows path
_ESCAPED_NEWLINE = re.compile(r"\\n(?=[A-Z ])")


def clean(text: str) -> str:
    """``text`` with full-width forms folded, markdown marks and per-line log prefixes removed."""
    text = unicodedata.normalize("NFKC", text)
    text = _ESCAPED_NEWLINE.sub("\n", text)
    text = text.translate(_MARKUP)
    # a prefix can repeat (a quoted log line): two passes remove "> [rank0]:" and the like
    return _PREFIX.sub("", _PREFIX.sub("", text))


def squash(text: str) -> str:
    """``text`` with every whitespace character removed."""
    return "".join(text.split())


def as_written(cleaned: str, start: int, end: int) -> str:
    """The words of ``cleaned`` that ``squash(cleaned)[start:end]`` squashed, as the paste wrote
    them (runs of whitespace as one space): evidence quotes the user's text, not the squashed
    string the patterns search."""
    kept = [i for i, ch in enumerate(cleaned) if not ch.isspace()]   # squash's survivors
    if not 0 <= start < end <= len(kept):
        return ""
    return " ".join(cleaned[kept[start]:kept[end - 1] + 1].split())


_NAME_END = re.compile(r"(?:OutOfMemoryError|RuntimeError|AcceleratorError)\s*:")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def exception_name(text: str, before: int) -> str | None:
    """The exception named last before offset ``before`` of ``text`` (e.g.
    ``torch.OutOfMemoryError``), when nothing but whitespace and at most a backend word separate
    it from the message; None otherwise."""
    found = None
    start = max(0, before - 4000)
    for m in _NAME_END.finditer(text, start, before):
        gap = text[m.end():before].strip()
        if len(gap) <= 6:
            found = m
    if found is None:
        return None
    end = found.end() - 1
    while text[end - 1].isspace():
        end -= 1
    begin = found.start()
    while begin > 0 and found.start() - begin < MAX_NAME and text[begin - 1] in _NAME_CHARS:
        begin -= 1
    return text[begin:end].strip(". ") or None

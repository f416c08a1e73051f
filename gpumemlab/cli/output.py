"""The one writer every ``gpumemlab`` command prints through.

Commands print strings that came from files the user was handed: frame names, file names and
user metadata of a snapshot (``report``, ``diff``, ``doctor``, ``verify``), a certificate's
fields, a student's id. Such a string may hold terminal escape sequences (clear the screen, move
the cursor up and overwrite a ``[FAIL]`` line with a fake ``[PASS]``), carriage returns, bidi
overrides or lone surrogates (which make a UTF-8 terminal's write raise). ``clean_output``
replaces ``sys.stdout`` and ``sys.stderr`` for the length of a command by writers that pass every
text through ``gpumemlab.cleantext.clean_text`` (control characters shown as visible ``\\x1b``
escapes; newlines and tabs kept), so no command has to remember to clean what it prints. The
kit's own control characters (the ``\\r`` of a progress line) go to ``raw_stream``.
"""
from __future__ import annotations

import contextlib
import sys

from gpumemlab.cleantext import clean_text


class CleanWriter:
    """A text stream that cleans what is written to it, then writes to ``raw``."""

    def __init__(self, raw):
        self.raw = raw

    def write(self, text) -> int:
        self.raw.write(clean_text(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.raw.flush()

    def __getattr__(self, name):     # isatty, fileno, encoding, ...: the raw stream's
        return getattr(self.raw, name)


def raw_stream(stream):
    """The stream under a ``CleanWriter`` (for the kit's own ``\\r``), else ``stream`` itself."""
    return stream.raw if isinstance(stream, CleanWriter) else stream


@contextlib.contextmanager
def clean_output():
    """Clean everything printed to ``sys.stdout`` and ``sys.stderr`` inside the block."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = CleanWriter(saved[0]), CleanWriter(saved[1])
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved

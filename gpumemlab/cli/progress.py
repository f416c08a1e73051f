"""Progress for the commands' long steps: one status line on stderr, redrawn every second.

``assign``, ``grade``, ``plan``, ``selftest`` and the doctor's settings search can take from a few
seconds to minutes; without a sign of life a user cannot tell work from a hang. ``ticker(label)``
shows ``label ... 12 s`` (and whatever ``update`` adds: ``3/30 graded``) on stderr, redrawn
in place, and clears it when the step ends. It is off under ``--quiet`` and whenever stderr is
not a terminal, so logs, pipes and the tests' captured output never hold a ``\\r``.
"""
from __future__ import annotations

import sys
import threading
import time

from gpumemlab.cli.output import raw_stream

EVERY_S = 1.0


def add_quiet(parser) -> None:
    """``--quiet``: no progress line (errors and results are printed as ever)."""
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress line on stderr (it is shown only on a terminal)")


def wanted(args, stream=None) -> bool:
    """Progress is drawn only on a terminal, and never under ``--quiet``."""
    stream = sys.stderr if stream is None else stream
    if getattr(args, "quiet", False):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Ticker:
    """The status line of one step (a no-op when ``on`` is False)."""

    def __init__(self, label: str, stream, on: bool, every: float = EVERY_S):
        self.label, self.on, self.every = label, on, every
        self.stream = raw_stream(stream)     # the kit's own \r, past the cleaning writer
        self.detail = ""
        self.start = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.on:
            self._draw()
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self.on:
            self._stop.set()
            self._thread.join()
            self._clear()

    def update(self, detail: str) -> None:
        """Replace the part after the label (e.g. ``3/30 graded``) and redraw."""
        self.detail = detail
        if self.on:
            self._draw()

    def line(self, text: str, stream=None) -> None:
        """Print a whole line above the status line (grade's per-student results; a planned
        script's output, to ``stream``)."""
        if not self.on:
            return
        with self._lock:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            out = self.stream if stream is None else stream
            out.write(text.rstrip("\n") + "\n")
            out.flush()
        self._draw()

    def _run(self):
        while not self._stop.wait(self.every):
            self._draw()

    def _draw(self):
        elapsed = time.monotonic() - self.start
        detail = f" {self.detail}" if self.detail else ""
        with self._lock:
            self.stream.write(f"\r\x1b[K{self.label} ...{detail} {elapsed:.0f} s")
            self.stream.flush()

    def _clear(self):
        with self._lock:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def ticker(args, label: str, stream=None) -> Ticker:
    """A ``Ticker`` for ``label``, on when ``wanted(args)``."""
    stream = sys.stderr if stream is None else stream
    return Ticker(label, stream, wanted(args, stream))


class LineSink:
    """A file-like ``progress`` argument (``grade_all`` prints one line per student into it)
    whose lines the ticker prints above its status line, counting them."""

    def __init__(self, tick: Ticker, total_label: str = "done"):
        self.tick, self.total_label, self.buf, self.count = tick, total_label, "", 0

    def write(self, text: str) -> int:
        self.buf += text
        while "\n" in self.buf:
            line, self.buf = self.buf.split("\n", 1)
            self.count += 1
            self.tick.line(line)
            self.tick.update(f"{self.count} {self.total_label}")
        return len(text)

    def flush(self) -> None:
        pass

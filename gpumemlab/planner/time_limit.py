"""A time limit on the script ``gpumemlab plan`` runs, said in one line when it is reached.

Every operator a script runs goes through fake tensors' Python dispatch (a fraction of a
millisecond each, against microseconds of a kernel launch on a card), so a script that runs a
million small operators (an RNN cell called per time step, per layer, with checkpointing's
recomputation) plans for many minutes, and one that loops forever never ends. At the limit the
script is stopped where it is, by ``PlanTimeLimit``, from two places, so that it is caught in
either kind of work:

* the fake mode's dispatch (``ScriptFakeMode.__torch_dispatch__`` checks ``mode.deadline`` on
  every operator, in whichever thread runs it: autograd's backward runs on a thread of its own and
  hands the exception to the ``backward()`` call that waits for it);
* ``SIGALRM`` in the main thread (``signal.setitimer``), for a loop of plain Python.

Each raise moves ``mode.deadline`` ``RETRY_S`` on: the two do not both fire at once, and one
swallowed where Python ignores exceptions (a weakref callback, a ``__del__``) is raised again.

``PlanTimeLimit`` is a ``BaseException`` (as ``KeyboardInterrupt`` is), so a script's ``except
Exception`` does not swallow it. The plan then has ``fits`` null, the peaks up to there, and the
line ``limit_line`` makes, with the operators run and their rate.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time

__all__ = ["PlanTimeLimit", "time_limit", "limit_line", "DEFAULT_TIME_LIMIT", "RETRY_S"]

DEFAULT_TIME_LIMIT = 900          # seconds: 15 minutes
RETRY_S = 5.0                     # raised again this long after, if the script is still running


class PlanTimeLimit(BaseException):
    """The script ran past ``gpumemlab plan``'s time limit."""


@contextlib.contextmanager
def time_limit(mode, seconds, started_file=None):
    """Stop the script with ``PlanTimeLimit`` after ``seconds`` (None or 0: no limit); yields a
    dict with ``start`` and, once reached, ``reached``. ``started_file`` is written at the start
    (the command ends a planning process stuck past the limit, counted from it)."""
    state = {"start": time.monotonic(), "seconds": seconds, "reached": False}
    if started_file:
        with open(started_file, "w", encoding="utf-8"):
            pass
    if not seconds:
        yield state
        return

    def _alarm(signum, frame):
        if mode.deadline is None or time.monotonic() < mode.deadline:
            return                      # the dispatch raised it a moment ago
        mode.deadline = time.monotonic() + RETRY_S
        state["reached"] = True
        raise PlanTimeLimit(seconds)

    mode.deadline = state["start"] + seconds
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGALRM, _alarm) if main else None
    if main:                            # and again every RETRY_S, should one be swallowed
        signal.setitimer(signal.ITIMER_REAL, seconds, RETRY_S)
    try:
        yield state
    finally:
        mode.deadline = None
        if main:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def limit_line(seconds, ops: int, elapsed: float, where: str) -> str:
    """The plan's one line for a script stopped at the limit."""
    rate = f", about {ops / elapsed:,.0f} a second" if elapsed > 0 and ops else ""
    return (f"the plan ran past its time limit of {seconds:g} s{where}: {ops:,} operators run "
            f"on fake tensors so far{rate}; the peaks are up to there. A script that runs many "
            f"small operators (per time step, per layer) plans slowly: give it fewer steps or "
            f"iterations, or more time (gpumemlab plan --time-limit SECONDS, 0 for none)")

"""The simulated card a script runs against: a ``SimulatedGPU`` fed, in order, with the allocations
and frees a running fake-tensor ``Capture`` records, so that ``torch.cuda.memory_allocated()`` and
its kin can answer mid-script what the real card would hold at that point.

The capture is fed lazily (``sync``), before every answer and at the end; the peaks are tracked per
fed entry, for the whole run and for the recording window the script opens with
``torch.cuda.memory._record_memory_history`` and closes with ``_dump_snapshot``. An allocation the
card cannot hold is recorded as the run's first OOM (where a real run would have stopped) and the run
goes on, so that the plan can say how much more it needed.
"""
from __future__ import annotations

from gpumemlab.devices.errors import OutOfMemoryError
from gpumemlab.devices.simulated import SimulatedGPU

__all__ = ["LiveCard"]


class LiveCard:
    def __init__(self, capture, total_memory: int, alloc_conf: str, context_bytes: int):
        self.capture = capture
        self.gpu = SimulatedGPU(total_memory, alloc_conf, record_history=False,
                                record_frames=False, other_memory=context_bytes,
                                name="gpumemlab simulated GPU")
        self._fed = [0, 0]            # entries of capture.prelude, capture.entries fed so far
        self._live = {}               # trace address -> Allocation (None: it ran out)
        self.oom = None               # the first allocation that ran out: {"size", "message", ...}
        self.peak = [0, 0]            # allocated, reserved over the whole run
        self.window = None            # {"start": entry count, "peak": [a, r], "open": bool}
        self.missing_peak = 0         # bytes the OOMed allocations would have added, at most

    # --- feeding -------------------------------------------------------------------------
    def sync(self) -> None:
        cap = self.capture
        for which, entries in ((0, cap.prelude), (1, cap.entries)):
            i = self._fed[which]
            while i < len(entries):
                self._apply(entries[i])
                i += 1
            self._fed[which] = i

    def _apply(self, e) -> None:
        action = e["action"]
        if action == "alloc":
            try:
                self._live[e["addr"]] = self.gpu.empty(e["size"])
            except OutOfMemoryError as exc:
                self._live[e["addr"]] = None
                if self.oom is None:
                    self.oom = {"size": e["size"], "message": str(exc).splitlines()[0],
                                "step": e.get("user_metadata") or None}
                self.missing_peak += e["size"]
        elif action == "free_completed":
            a = self._live.pop(e["addr"], None)
            if a is not None:
                self.gpu.free(a)
        else:
            return
        now = (self.gpu.memory_allocated(), self.gpu.memory_reserved())
        self.peak = [max(self.peak[0], now[0]), max(self.peak[1], now[1])]
        w = self.window
        if w is not None and w["open"]:
            w["peak"] = [max(w["peak"][0], now[0]), max(w["peak"][1], now[1])]

    # --- the recording window ------------------------------------------------------------
    def record_memory_history(self, enabled="all", *args, **kwargs) -> None:
        self.sync()
        if enabled in (None, False):
            if self.window is not None:
                self.window["open"] = False
            self.gpu.record_memory_history(None)
            return
        if self.window is None or not self.window["open"]:
            now = [self.gpu.memory_allocated(), self.gpu.memory_reserved()]
            self.window = {"open": True, "peak": now, "start_allocated": now[0],
                           "start_reserved": now[1], "dumps": []}
        self.gpu.record_memory_history("all" if enabled in (True, "all") else enabled)

    def dump_snapshot(self, path) -> None:
        from gpumemlab.recordings.files import dump_snapshot
        self.sync()
        if self.window is not None:
            self.window["dumps"].append(str(path))
            self.window["closed_peak"] = list(self.window["peak"])
        dump_snapshot(self.gpu.snapshot(), path)

    def window_figures(self) -> tuple:
        """(peak allocated, peak reserved, how the window was chosen)."""
        self.sync()
        w = self.window
        if w is not None and w.get("closed_peak"):
            a, r = w["closed_peak"]
            return a, r, (f"from torch.cuda.memory._record_memory_history to the last "
                          f"_dump_snapshot ({len(w['dumps'])} dump(s)), its start state included")
        if w is not None:
            return (w["peak"][0], w["peak"][1], "from torch.cuda.memory._record_memory_history to "
                    "the end of the run (no _dump_snapshot), its start state included")
        return self.peak[0], self.peak[1], "the whole run (the script records no memory history)"

"""The processes of the machine as Linux's ``/proc`` lists them now: each one's ``stat`` line, read
once (the grader's leftover kills walk it: by uid, and by parent)."""
from __future__ import annotations

import os


def process_stats():
    """(pid, the bytes of ``/proc/PID/stat``) for every process in ``/proc``; one that ended
    meanwhile is left out."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue   # gone meanwhile
        yield int(entry), stat

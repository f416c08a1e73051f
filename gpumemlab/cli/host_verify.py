"""``gpumemlab verify SNAPSHOT --host``: replay the recording's ``host_traces`` (pinned host
memory) on the host allocator model and check every address (recordings/replay/host.py).

Exit 0 only when every pin and release is where it was recorded and the end state matches
``host_segments``; 1 otherwise, and 1 with "nothing checked" for a host trace without pins.
"""
from __future__ import annotations

import json

from gpumemlab.cli import CLIError
from gpumemlab.recordings.replay import ReplayError, replay
from gpumemlab.recordings.source import read_snapshot

__all__ = ["verify_host"]


def verify_host(snap, path: str, as_json: bool) -> int:
    try:
        r = replay(read_snapshot(snap, name=path), host=True)
    except ReplayError as exc:
        raise CLIError(str(exc)) from None
    ok = r.allocations > 0 and r.address_mismatches == 0 and r.final_state_matches is not False
    if as_json:
        print(json.dumps({"snapshot": path, "verified": ok, "host": {
            "entries": r.entries, "replayed": r.replayed, "alloc_conf": r.recorded_alloc_conf,
            "allocations": r.allocations, "address_mismatches": r.address_mismatches,
            "segment_mismatches": r.segment_mismatches, "start_blocks": r.start_blocks,
            "final_state_matches": r.final_state_matches, "notes": r.notes}}, indent=1))
        return 0 if ok else 1
    print(r.summary())
    for note in r.notes:
        print(f"  note: {note}")
    if r.final_state_matches is False:
        print("  the model's host blocks at the end differ from host_segments")
    if r.allocations == 0:
        print("NOT verified: nothing checked (the host trace holds no pin)")
    else:
        print("verified: every host address reproduced" if ok else "NOT verified")
    return 0 if ok else 1

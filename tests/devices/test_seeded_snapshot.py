"""A seeded simulated-GPU run gives exactly the snapshot it gave when the fixture was made
(segments, trace, frames, settings): speed work on the allocator and on frame capture changes no
decision and no recorded byte. The run and how to regenerate the fixture: tests/seeded_run.py."""
from __future__ import annotations

import seeded_run


def test_seeded_runs_match_the_stored_snapshots():
    stored = seeded_run.load_fixture()
    fresh = seeded_run.runs()
    assert set(fresh) == set(stored)
    for name in stored:
        for key in stored[name]:
            assert fresh[name][key] == stored[name][key], f"{name}: {key} differs"
        assert fresh[name] == stored[name]

"""The doctor's settings search: worker processes give the results of one process, and a time
budget stops the search with the report saying so."""
import pathlib
import time

import pytest

import gpumemlab as gml
from gpumemlab.doctor import search
from gpumemlab.recordings.source import read_snapshot

KIT = pathlib.Path(__file__).parents[1] / "fixtures" / "snapshots" / "sim_fragmentation_oom.pickle"


def _search(workers, deadline=None):
    snap = read_snapshot(str(KIT))
    share = gml.replay(snap).total_memory
    return search.search_settings(snap, "", share, 0, 64 << 20, False, workers=workers,
                                  deadline=deadline)


@pytest.mark.skipif(search.workers_available(2) < 2, reason="worker processes on Linux only")
def test_worker_processes_give_the_results_of_one_process():
    one, two = _search(1), _search(2)
    assert one == two and len(one) > 5 and not any(c.skipped for c in one)
    assert any(c.fits for c in one) and any(not c.fits for c in one)
    d1 = gml.doctor(str(KIT), workers=1)
    d2 = gml.doctor(str(KIT), workers=2)
    assert d1.fixes == d2.fixes and d1.recommended == d2.recommended
    assert d1.details["search"]["workers"] == 1 and d2.details["search"]["workers"] == 2


@pytest.mark.parametrize("workers", [1, 2])
def test_a_spent_budget_skips_the_rest_and_the_report_says_so(workers):
    skipped = _search(workers, deadline=time.monotonic())           # no time at all
    assert skipped and all(c.skipped and c.fits is None for c in skipped)
    d = gml.doctor(str(KIT), budget_s=0, workers=workers)
    s = d.details["search"]
    assert s["stopped_at_budget"] and s["replayed"] == 0 and s["budget_s"] == 0
    assert not any(f.alloc_conf for f in d.fixes)                   # nothing unverified listed
    assert any("stopped at its time budget" in n for n in d.notes)
    assert "time budget" in str(d)
    full = gml.doctor(str(KIT), workers=workers)
    assert not full.details["search"]["stopped_at_budget"]
    assert full.details["search"]["replayed"] == full.details["search"]["candidates"]


def test_smallest_card_past_its_deadline_keeps_a_verified_card():
    snap = read_snapshot(str(KIT))
    card = search.smallest_card(snap, "", 0, deadline=time.monotonic())
    assert card["stopped_at_budget"] and card["bytes"] is not None
    assert gml.replay(snap, alloc_conf="", total_memory=card["bytes"]).oom is None
    exact = search.smallest_card(snap, "", 0)
    assert not exact["stopped_at_budget"] and exact["bytes"] <= card["bytes"]


@pytest.mark.skipif(search.workers_available(2) < 2, reason="worker processes on Linux only")
def test_inside_a_worker_the_search_runs_in_one_process():
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(search.workers_available, (4,)) == 1
    assert search.workers_available(4) == 4 and search.workers_available(0) == 1

"""gml.growth without step marks: the iterations found from the recurring allocation sites of
real torch loops captured on the CPU, how they were found and how sure, against the marks the
same loops carry; explicit starts and marks as before."""
import collections
import json

import pytest

torch = pytest.importorskip("torch")

import gpumemlab as gml  # noqa: E402
from gpumemlab.lessons import growth_cases as cases  # noqa: E402
from gpumemlab.doctor.growth import GrowthError  # noqa: E402
from gpumemlab.doctor.growth.iterations import find_iterations  # noqa: E402


def _unmarked(rec):
    for e in rec.trace:
        e.pop("user_metadata", None)
    return rec


@pytest.mark.parametrize("name", sorted(cases.CASES))
def test_without_marks_the_iterations_and_causes_are_those_the_marks_give(name):
    make = cases.CASES[name]
    for fixed in ((False,) if name == "fragmentation" else (False, True)):
        rec = make() if name == "fragmentation" else make(fixed=fixed)
        marked = gml.growth(rec)
        auto = gml.growth(_unmarked(rec))
        assert auto.found["method"] == "auto" and marked.found["method"] == "marks"
        assert [it.start for it in auto.iterations] == [it.start for it in marked.iterations]
        assert auto.causes == marked.causes, (name, fixed)
        assert [it.kept_bytes for it in auto.iterations] == \
            [it.kept_bytes for it in marked.iterations]
        assert auto.found["level"] == "high" and auto.found["confidence"] >= 0.9
        assert "found without marks" in auto.text()


def test_a_loop_written_without_marks_is_split_at_its_first_recurring_site():
    model = cases.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    kept = []
    with gml.capture(model, opt) as rec:
        for i in range(5):
            x, y = cases._batch(i, 256, 256, 256)            # the step's first allocations
            out, _loss = cases._train(model, opt, x, y)
            kept.append(out)                                  # a leak: one output per step
        del out, _loss, x, y
    report = gml.growth(rec)
    assert len(report.iterations) == 5 and report.causes == ["leak"] * 5
    assert all(it.kept_bytes == 256 * 256 * 4 for it in report.iterations)
    first = rec.trace[report.found["anchor_index"]]
    assert first["action"] == "alloc" and "_batch" in report.found["anchor_where"]
    assert report.found["anchor_index"] == min(i for i, e in enumerate(rec.trace)
                                               if e["action"] == "alloc" and e.get("frames"))
    out = json.loads(report.json())
    assert out["iterations_found"]["method"] == "auto" and out["causes"] == ["leak"] * 5
    del kept


def test_a_bounded_history_is_carried_not_leaked():
    model = cases.mlp()
    with gml.capture(model) as rec:
        last = collections.deque(maxlen=2)
        for i in range(6):
            x, _y = cases._batch(i, 256, 256, 256)
            last.append(model(x).detach())
        last.clear()
        del x, _y
    report = gml.growth(rec)
    assert len(report.iterations) == 6
    # outputs freed two steps later are carried; the last two are alive when the last
    # iteration ends, which no rule can tell from a leak (docs/GROWTH.md, how far to trust it)
    for it in report.iterations[:4]:
        assert it.cause != "leak" and not it.kept and it.carried


def test_steps_that_share_nothing_score_low_and_no_recurring_site_is_one_line():
    def entry(site, size=1024):
        return {"action": "alloc", "size": size, "addr": 0,
                "frames": [{"filename": f"/w/{site}.py", "line": 1, "name": "f"}]}
    alike = [entry(s) for _ in range(4) for s in "abc"]
    starts, info = find_iterations(alike, lambda e: e["frames"][0]["filename"])
    assert starts == [0, 3, 6, 9] and info["confidence"] == 1.0 and info["level"] == "high"
    mixed = [entry(s) for s in "abcadbeafbgh"]          # 'a' recurs, little else does
    starts, info = find_iterations(mixed, lambda e: e["frames"][0]["filename"])
    assert info["level"] == "low" and info["confidence"] < 0.6
    starts, info = find_iterations([entry(s) for s in "abcdef"],
                                   lambda e: e["frames"][0]["filename"])
    assert starts == [] and info["anchor_index"] is None
    with gml.capture() as rec:
        torch.ones(3)
    with pytest.raises(GrowthError, match="no allocation site recurs"):
        gml.growth(rec)


def test_explicit_starts_and_marks_still_win():
    rec = cases.predictions_kept(steps=3)
    marked = gml.growth(rec)
    given = gml.growth(rec, iterations=[it.start for it in marked.iterations])
    assert given.found["method"] == "given" and given.causes == marked.causes
    auto = gml.growth(rec, iterations="auto")
    assert auto.found["method"] == "auto" and auto.causes == marked.causes

"""``nvidia-smi`` called by a script under ``gpumemlab plan`` answers from the simulated card
(``planner/nvidia_smi.py``): used is the context estimate plus what the allocator reserved at the
moment of the call, total the card; a query it does not answer says so in one line."""
from tests.planner.plan_run import plan_fixture


def _lines(run, tag):
    return [line[len(tag) + 1:] for line in run.stderr.splitlines() if line.startswith(tag + " ")]


def test_nvidia_smi_answers_from_the_simulated_card(library):
    run, r, _ = plan_fixture("asks_nvidia_smi.py")
    assert r["error"] is None and r["fits"] is True, r["error"]
    # 512 MiB context estimate + one 256 MiB segment, on the default 80 GiB card
    assert _lines(run, "CSV") == ["768, 81920"]
    assert _lines(run, "WITH-HEADER") == ["memory.free [MiB]|81152 MiB|"]
    # after del x the segment stays cached: the driver still sees it used
    assert "768MiB / 81920MiB" in _lines(run, "TABLE")[0]
    other = _lines(run, "OTHER")[0]
    assert other.startswith("2 gpumemlab plan's nvidia-smi answers memory.total/used/free")
    assert other.endswith('field "utilization.gpu" of the query is not answered')

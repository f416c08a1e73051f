"""``torch.cuda.Event`` timing under ``gpumemlab plan``: it answered 0 ms, and a benchmark that
divides by its measured time (a throughput, a speed-up) stopped on ZeroDivisionError; an interval
is now the host's time between the two records, as ``time.time()`` differences are."""

from .plan_run import plan_fixture


def test_a_script_dividing_by_its_event_time_plans(library):
    run, r, _ = plan_fixture("event_timing.py")
    assert run.returncode == 0, r["error"]
    assert r["fits"] is True and "throughput " in run.stderr
    rate = float(run.stderr.split("throughput ")[1].split()[0])
    assert rate > 0

"""``torch.allclose``/``torch.equal`` of fake tensors under ``gpumemlab plan``: they return a
Python bool, a value fake tensors do not have, and stopped the script as a data-dependent
operation; they now answer True (``equal`` of different shapes False), counted as placeholder
reads like ``.item()``."""

from .plan_run import plan_fixture


def test_comparisons_answer_and_are_counted(library):
    run, r, _ = plan_fixture("compares_gradients.py")
    assert run.returncode == 0, r["error"]
    assert "match True True False" in run.stderr
    assert r["placeholder_reads"] == 3
    assert "values read from GPU tensors (3 reads" in " ".join(n["what"] for n in r["not_seen"])

"""A 0-dim fake tensor in an f-string with a format spec (``f"{loss:.4f}"``): torch formats the
``item()`` of a plain Tensor only, so a FakeTensor raised TypeError and stopped the plan (llm.c's
llm.c/train_gpt2.py prints its gradient norm so); now it formats the placeholder 0, counted as a read."""

from .plan_run import plan_fixture


def test_a_formatted_loss_prints_the_placeholder(library):
    run, r, _ = plan_fixture("formats_a_loss.py")
    assert run.returncode == 0, r["error"]
    assert "loss 0.000000 | norm 0.0000 | shape (128, 128)" in run.stderr
    assert r["placeholder_reads"] >= 2

"""TorchScript under ``gpumemlab plan``: importing ``torch.distributed.optim`` (llm.c's
llm.c/train_gpt2.py does, for its ZeRO option) compiles TorchScript classes that call ``torch.tensor``,
which the planner stands in for; TorchScript tried to compile the stand-in and stopped the script
at its imports. Now both that import and a scripted function of the script's own plan."""

from .plan_run import plan_fixture


def test_torchscript_classes_and_functions_plan(library):
    run, r, _ = plan_fixture("torchscript_import.py")
    assert run.returncode == 0, r["error"]
    assert "shape (256, 256) cuda" in run.stderr
    # the input and the result (256 KiB each), and the scalar 2.0 made on the card (512 B)
    assert r["peak_allocated_bytes"] == 2 * 256 * 256 * 4 + 512

"""``torch.cuda.cudart()`` under ``gpumemlab plan``: a CPU-only torch has no CUDA runtime module,
so a profiling script's ``cudart().cudaProfilerStart()`` (kevinstephano/simple_dl_models' runner
calls ``torch.cuda.profiler.start()`` after its warm-up steps) stopped it with "'NoneType' object
has no attribute 'cudaProfilerStart'", reported as the script's own error. The switches now
answer cudaSuccess and the script plans to its end."""

from .plan_run import plan_fixture

MiB = 1 << 20


def test_the_profiler_switches_answer_and_the_script_plans(library):
    run, r, _ = plan_fixture("cudart_profiler.py")
    assert run.returncode == 0, r["error"]
    assert r["fits"] is True and "profiled" in run.stderr
    # at ``z = z + 1``: x, y, the old z and the new one (4 MiB each), and the cuBLAS workspace
    # estimate of the first matrix multiply (8 MiB + 128 KiB)
    assert r["peak_allocated_bytes"] == 4 * 4 * MiB + 8 * MiB + 128 * 1024

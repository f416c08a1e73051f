"""The planner's fake-CUDA library for a test (``gpumemlab.recordings.fake_cuda.build``), or a skip
where this machine lacks what building it needs: not Linux, no C++ compiler, no torch
(``FakeCudaUnavailable``, whose message says what to install). Where the tools are there and
compiling against this torch fails (``FakeCudaBuildFailed``) the test fails, never skips: a build
failure is a defect of the kit or of that torch build, and ``scripts/torch_matrix.sh`` must see it."""
import pytest


def library_or_skip():
    """The verified library's path (None where torch's own CUDA hooks serve fake tensors)."""
    from gpumemlab.recordings import fake_cuda

    try:
        return fake_cuda.build()
    except fake_cuda.FakeCudaBuildFailed as exc:
        pytest.fail(f"the fake-CUDA library failed to build with this torch: {exc}", pytrace=False)
    except fake_cuda.FakeCudaUnavailable as exc:
        pytest.skip(f"this machine cannot build the fake-CUDA library: {exc}")

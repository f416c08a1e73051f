"""Shared set-up for every test room (tests/<room>/, each a package named like the gpumemlab
package it tests).

The helper modules beside this file (snapshot_builders, seeded_run, lesson_runs, lesson_answers,
fake_cuda_library),
the classroom fixtures' builders (tests/fixtures/classroom) and the real-GPU recorder
(tests/gpu/record_fixtures.py) are imported by plain name from any room, so their folders go on
sys.path here, once, before any test module is imported."""
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
for folder in (TESTS, TESTS / "fixtures" / "classroom", TESTS / "gpu"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


@pytest.fixture(scope="module")
def library():
    """The planner's fake-CUDA library, built once (tests/planner and tests/cli use it); a
    machine without a C++ compiler skips the test with the reason, a build that fails fails it
    (fake_cuda_library.library_or_skip)."""
    from fake_cuda_library import library_or_skip

    return library_or_skip()

"""The flat notebook API: every name in gpumemlab's table resolves, and the function-like names
(gml.device, gml.capture, gml.replay, gml.quiz, ...) stay callable even when every submodule was
imported first: no submodule may share a flat function's name, or importing it would replace the
function on the package."""
import subprocess
import sys
import textwrap

import gpumemlab

FUNCTIONS = ("device", "capture", "replay", "quiz", "show", "timeline", "player", "fragmentation",
             "load_snapshot", "dump_snapshot", "SimulatedGPU", "CudaGPU", "format_size", "parse_size")


def test_every_flat_name_resolves():
    for name in gpumemlab.__all__:
        assert getattr(gpumemlab, name) is not None, name


def test_callables_survive_importing_all_submodules_first():
    code = textwrap.dedent(f"""
        import importlib, pkgutil
        import gpumemlab
        for info in pkgutil.walk_packages(gpumemlab.__path__, "gpumemlab."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
        bad = [n for n in {FUNCTIONS!r} if not callable(getattr(gpumemlab, n))]
        assert callable(gpumemlab.quiz.check) and callable(gpumemlab.quiz.summary)
        print(bad)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"

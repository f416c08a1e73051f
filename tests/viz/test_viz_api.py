"""The flat names resolve to functions, and importing the views costs nothing heavy."""
import subprocess
import sys


def test_flat_names_are_the_functions_even_after_every_submodule_is_imported():
    import gpumemlab as gml
    import gpumemlab.viz.blockmap  # noqa: F401
    import gpumemlab.viz.live_player  # noqa: F401
    import gpumemlab.viz.memory_timeline  # noqa: F401
    import gpumemlab.viz.text  # noqa: F401
    for name in ("show", "timeline", "player", "text_blockmap", "text_trace", "fragmentation"):
        assert callable(getattr(gml, name)), name
        assert getattr(gml, name).__name__ == name


def test_importing_viz_and_metrics_loads_no_plotting_or_widgets():
    code = ("import sys, gpumemlab.viz, gpumemlab.viz.metrics, gpumemlab.viz.history, "
            "gpumemlab.viz.text; "
            "print(sorted(m for m in ('matplotlib', 'ipywidgets', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"

"""Views of GPU memory: block map, timeline, live player, and text renderers.

Every view reads snapshot dicts (PyTorch's ``torch.cuda.memory._snapshot()`` format), so real and
simulated snapshots look alike. Names resolve lazily: importing ``gpumemlab.viz`` imports neither
matplotlib nor ipywidgets. No submodule shares a name with a function it exports: importing
``gpumemlab.viz.timeline`` would otherwise replace the ``timeline`` function on this package.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "show": "gpumemlab.viz.blockmap",
    "timeline": "gpumemlab.viz.memory_timeline",
    "player": "gpumemlab.viz.live_player",
    "Player": "gpumemlab.viz.live_player",
    "text_blockmap": "gpumemlab.viz.text",
    "text_trace": "gpumemlab.viz.text",
    "History": "gpumemlab.viz.history",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    try:
        module = importlib.import_module(_LAZY[name])
    except KeyError:
        raise AttributeError(f"module 'gpumemlab.viz' has no attribute {name!r}") from None
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return __all__

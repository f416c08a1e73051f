"""Views of GPU memory: block map, timeline, live player, and text renderers.

Every view reads snapshot dicts (PyTorch's ``torch.cuda.memory._snapshot()`` format), so real and
simulated snapshots look alike. Names resolve lazily: importing ``gpumemlab.viz`` imports neither
matplotlib nor ipywidgets. No submodule shares a name with a function it exports: importing
``gpumemlab.viz.timeline`` would otherwise replace the ``timeline`` function on this package.
"""
from __future__ import annotations

from gpumemlab._lazy import lazy_attributes

_LAZY = {
    "show": (".blockmap", "show"),
    "timeline": (".memory_timeline", "timeline"),
    "player": (".live_player", "player"),
    "page_map": (".pages", "page_map"),
    "Player": (".live_player", "Player"),
    "text_blockmap": (".text", "text_blockmap"),
    "text_trace": (".text", "text_trace"),
    "History": (".history", "History"),
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

"""gpumemlab: learn, teach and investigate GPU memory management.

The flat notebook API (``import gpumemlab as gml``). Names are resolved lazily so that
importing the package has no side effects and does not import torch, matplotlib or
ipywidgets until a name that needs them is used.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

# name -> (module, attribute). Modules are imported on first use.
_LAZY = {
    # sizes
    "KiB": ("gpumemlab.units", "KiB"),
    "MiB": ("gpumemlab.units", "MiB"),
    "GiB": ("gpumemlab.units", "GiB"),
    "format_size": ("gpumemlab.units", "format_size"),
    "parse_size": ("gpumemlab.units", "parse_size"),
    # devices
    "SimulatedGPU": ("gpumemlab.simulated_gpu", "SimulatedGPU"),
    "Allocation": ("gpumemlab.simulated_gpu", "Allocation"),
    "OutOfMemoryError": ("gpumemlab.errors", "OutOfMemoryError"),
    "CudaGPU": ("gpumemlab.cuda_device", "CudaGPU"),
    "device": ("gpumemlab.cuda_device", "device"),
    # snapshots, capture, replay
    "load_snapshot": ("gpumemlab.snapshot_io", "load_snapshot"),
    "dump_snapshot": ("gpumemlab.snapshot_io", "dump_snapshot"),
    "SnapshotError": ("gpumemlab.snapshot_io", "SnapshotError"),
    "capture": ("gpumemlab.capturing", "capture"),
    "replay": ("gpumemlab.replaying", "replay"),
    "scenarios": ("gpumemlab.scenarios", None),
    # views and metrics
    "show": ("gpumemlab.viz", "show"),
    "timeline": ("gpumemlab.viz", "timeline"),
    "player": ("gpumemlab.viz", "player"),
    "text_blockmap": ("gpumemlab.viz", "text_blockmap"),
    "text_trace": ("gpumemlab.viz", "text_trace"),
    "fragmentation": ("gpumemlab.metrics", "fragmentation"),
    # paged KV caches
    "kvcache": ("gpumemlab.kvcache", None),
    # quizzes
    "quiz": ("gpumemlab.quizkit", "quiz"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'gpumemlab' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__():
    return __all__

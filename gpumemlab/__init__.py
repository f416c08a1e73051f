"""gpumemlab: learn, teach and investigate GPU memory management.

The flat notebook API (``import gpumemlab as gml``). Names are resolved lazily so that
importing the package has no side effects and does not import torch, matplotlib or
ipywidgets until a name that needs them is used.
"""
from __future__ import annotations

from ._lazy import lazy_attributes

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
    "SimulatedGPU": ("gpumemlab.devices.simulated", "SimulatedGPU"),
    "Allocation": ("gpumemlab.devices.simulated", "Allocation"),
    "OutOfMemoryError": ("gpumemlab.devices.errors", "OutOfMemoryError"),
    "CudaGPU": ("gpumemlab.devices.cuda", "CudaGPU"),
    "device": ("gpumemlab.devices.cuda", "device"),
    # snapshots, capture, replay
    "load_snapshot": ("gpumemlab.recordings.files", "load_snapshot"),
    "dump_snapshot": ("gpumemlab.recordings.files", "dump_snapshot"),
    "SnapshotError": ("gpumemlab.recordings.files", "SnapshotError"),
    "capture": ("gpumemlab.recordings.capture", "capture"),
    "fake_tensors": ("gpumemlab.recordings.fake", "fake_tensors"),
    "replay": ("gpumemlab.recordings.replay", "replay"),
    "scenarios": ("gpumemlab.devices.scenarios", None),
    "experiment": ("gpumemlab.lessons.experiment", "experiment"),
    # views and metrics
    "show": ("gpumemlab.viz", "show"),
    "timeline": ("gpumemlab.viz", "timeline"),
    "player": ("gpumemlab.viz", "player"),
    "page_map": ("gpumemlab.viz", "page_map"),
    "text_blockmap": ("gpumemlab.viz", "text_blockmap"),
    "text_trace": ("gpumemlab.viz", "text_trace"),
    "fragmentation": ("gpumemlab.viz.metrics", "fragmentation"),
    # the OOM doctor, and why memory grows
    "doctor": ("gpumemlab.doctor", None),    # the room itself is callable (see its docstring)
    "growth": ("gpumemlab.doctor.growth", "growth"),
    # the pre-flight planner
    "plan": ("gpumemlab.planner.plan", "plan"),
    # paged KV caches
    "kvcache": ("gpumemlab.kvcache", None),
    # quizzes
    "quiz": ("gpumemlab.quizkit", "quiz"),
    "predict": ("gpumemlab.lessons", "predict"),
    "reveal": ("gpumemlab.lessons", "reveal"),
    "exercise": ("gpumemlab.lessons", "exercise"),
    "whatif": ("gpumemlab.viz.whatif", "whatif"),
}

__all__ = sorted(_LAZY) + ["__version__"]
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())

"""The OOM doctor: from a pasted "CUDA out of memory" message or a snapshot to the cause and the
setting that would have saved the run.

``gml.doctor(source)`` (``api.doctor``) reads a message (``message.text`` cleans a paste,
``message`` (the package's face) reads every form PyTorch's allocators have printed, ``message.platform`` finds the
platform, ``message.sanity`` flags impossible figures, ``message.kind`` decides the kind,
``message.remedies`` fits the fixes, ``message.mode`` puts them together) or a snapshot
(``snapshot_mode``: the device that ran out (``devices``), faithful replay, the OOM, its kind and
``evidence``, then ``search`` of the allocator settings and the smallest card, each verified by a
replay and ranked in ``fixes``; ``snapshot_details`` for the structured part; ``state_only`` for a
snapshot without a trace) and returns a ``diagnosis.Diagnosis``, rendered as text or JSON
(``report``) or a self-contained HTML page (``report_html``).

Memory that grows step after step: ``gml.growth(recording)`` (``growth/``) names the cause of
each iteration (leak, one-time state, new shapes, higher peak, fragmentation, steady) with its
evidence (``growth.result``, drawn by ``growth.figure``, JSON by ``growth.json_form``), finding the
iterations itself when nothing marks them (``growth.iterations``); the real
torch loops that show each cause are in ``gpumemlab.lessons.growth_cases``.

This package is itself callable: ``gml.doctor`` is the room's name (tests/package/test_layout.py) and
importing any ``gpumemlab.doctor.*`` module sets ``gpumemlab.doctor`` to this package, so the
package calls ``api.doctor`` rather than letting the function be shadowed by its own room.
Importing this package imports none of its modules.
"""
from __future__ import annotations

import sys
import types

from gpumemlab._lazy import lazy_attributes

_LAZY = {
    "doctor": (".api", "doctor"),
    "Diagnosis": (".diagnosis", "Diagnosis"),
    "Fix": (".diagnosis", "Fix"),
    "parse_message": (".message", "parse_message"),
    "NotAnOOMMessage": (".message", "NotAnOOMMessage"),
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


class _CallableRoom(types.ModuleType):
    def __call__(self, source=None, *, message=None, total_memory=None, request=None,
                 device=None, search=True, workers=None, budget_s=None):
        """Diagnose an OOM from a snapshot, an exception or a message: see
        :func:`gpumemlab.doctor.api.doctor`."""
        return self.doctor(source, message=message, total_memory=total_memory, request=request,
                           device=device, search=search, workers=workers, budget_s=budget_s)


sys.modules[__name__].__class__ = _CallableRoom

"""``gml.doctor``: one entry for both modes, deciding from what it is given.

A snapshot (file path, dict, device, replay result, ``Snapshot``) goes to snapshot mode; a
message (``message=``, an exception such as ``torch.OutOfMemoryError``, or a string that is not
a file and holds a line break, "out of memory", "Allocation on device" or "Tried to allocate")
goes to message mode.
"""
from __future__ import annotations

import os

from .diagnosis import Diagnosis
from .message import NotAnOOMMessage
from .message.mode import diagnose_message
from .snapshot_mode import diagnose_snapshot

__all__ = ["doctor", "NotAnOOMMessage"]

# words of every message form (message.py): a string holding one is a message, not a file name
_MESSAGE_WORDS = ("out of memory", "allocation on device", "tried to allocate", "out_of_memory",
                  "oom when allocating", "resource_exhausted", "cache blocks", "kv cache",
                  "not enough memory")


def doctor(source=None, *, message: str | None = None, total_memory=None, request=None,
           device=None, search: bool = True, workers=None, budget_s=None) -> Diagnosis:
    """Diagnose an out-of-memory error and say what would have avoided it.

    Args:
        source: a snapshot (file, dict, device, replay result), an OOM exception, or the text
            of an OOM message.
        message: the text of a "CUDA out of memory" message (instead of ``source``).
        total_memory: the card's size (bytes, "80GiB", or "79.33GiB" as PyTorch prints it,
            rounded down to whole bytes): the first OOM on that card is diagnosed, and memory
            outside PyTorch's allocator is what it leaves over.
        request: for a snapshot without a trace: the request size to check against the state.
        device: which device's trace to replay (default: the one with a recorded OOM, else
            the first that runs out on ``total_memory``, else the first with a trace).
        search: replay the settings search and the smallest-card search (snapshot mode).
        workers: processes for the search's replays (default: one per core).
        budget_s: seconds the search may take (default ``search.DEFAULT_BUDGET_S``); past
            it, the search stops and the report says so.

    Returns a :class:`~gpumemlab.doctor.diagnosis.Diagnosis` (``print`` it; ``.as_dict()``;
    ``.html()`` for a self-contained page). Raises ``NotAnOOMMessage`` for a text that holds no
    OOM message, ``SnapshotError`` for a snapshot that cannot be read.
    """
    if message is not None:
        if source is not None:
            raise TypeError("pass a snapshot or message=, not both")
        return diagnose_message(message)
    if source is None:
        raise TypeError("doctor() needs a snapshot, an OOM exception or message=")
    if isinstance(source, BaseException):
        return diagnose_message(str(source), source=type(source).__name__)
    if isinstance(source, str) and not os.path.exists(source) and (
            "\n" in source or any(w in source.lower() for w in _MESSAGE_WORDS)):
        return diagnose_message(source)
    return diagnose_snapshot(source, total_memory=total_memory, request=request, device=device,
                             search=search, workers=workers, budget_s=budget_s)

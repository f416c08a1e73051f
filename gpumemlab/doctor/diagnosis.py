"""What the doctor returns: a :class:`Diagnosis` (the kind of OOM, the figures, the evidence, the
ranked fixes) and its :class:`Fix` entries, for both a pasted message and a snapshot.

The kinds (a message decides them by the rules in message/kind.py):

* ``"outside_pytorch"``: memory held outside PyTorch is what the allocation lacked: no allocator
  setting helps. "Outside PyTorch" has one meaning in every report: the card's memory that this
  process's caching allocator does not hold (message: total - free - reserved; snapshot: the
  card minus the allocator's share): other processes, this process's CUDA context and
  libraries, the desktop, the driver;
* ``"fragmentation"``: the request would fit if the memory the allocator holds free were one
  piece (a message: reserved-but-unallocated >= the request; a snapshot: allocated + request
  fits the card);
* ``"exhaustion"``: it would not: the program needs more memory than the card has (or one
  request is larger than the card or a memory fraction's cap);
* ``"unexplained"`` (message mode): the driver had clearly more free memory than the request
  after the allocator released its cache, so the figures do not explain the OOM: the platform
  does (WDDM, WSL, unified memory, per-allocation limits, drivers);
* ``"unknown"`` (message mode): the input says too little;
* ``"not_pytorch_allocator"`` (message mode): another framework's, a serving engine's, CUDA
  initialisation's, NCCL's or pinned host memory's error (``details["framework"]`` names it).

``kind`` is ``"no_oom"`` for a recording that fits, ``"unknown"`` (or None, written "unknown" in
the JSON) when the input does not say enough. Sizes are bytes; a field the input does not give is
None. ``as_dict`` carries ``schema_version`` (:data:`SCHEMA_VERSION`), the version of the JSON
fields in docs/DOCTOR.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass

from .report import to_json, to_text
from .report_html import to_html

__all__ = ["Diagnosis", "Fix", "KINDS", "SCHEMA_VERSION"]

KINDS = ("outside_pytorch", "fragmentation", "exhaustion", "unexplained", "unknown",
         "not_pytorch_allocator")
SCHEMA_VERSION = 1


@dataclass
class Fix:
    """One thing to change, with why it would help and how to do it.

    ``alloc_conf`` is the ``PYTORCH_CUDA_ALLOC_CONF`` string for an allocator setting (None for
    other fixes); in snapshot mode ``fits``/``peak_reserved_bytes``/``headroom_bytes``/
    ``first_failing_entry`` come from replaying the recording under it (``verified`` True).
    """

    name: str
    why: str
    how: str = ""
    code: str = ""
    alloc_conf: str | None = None
    fits: bool | None = None
    peak_reserved_bytes: int | None = None
    headroom_bytes: int | None = None
    first_failing_entry: int | None = None
    verified: bool = False
    total_memory_bytes: int | None = None


@dataclass
class Diagnosis:
    """A diagnosis (see the module docstring for ``kind``).

    ``summary`` is one paragraph; ``evidence`` lines of facts the input shows; ``cannot_tell``
    what this input cannot show; ``assumptions`` what a replay took for granted; ``precision``
    maps a field to the bytes of rounding in the text it came from (message mode).
    """

    mode: str                               # "message" or "snapshot"
    source: str
    kind: str | None
    summary: str
    requested_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    non_pytorch_bytes: int | None = None
    other_processes_bytes: int | None = None
    device: int | None = None
    fixes: list = field(default_factory=list)
    evidence: list = field(default_factory=list)
    cannot_tell: list = field(default_factory=list)
    assumptions: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    precision: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)  # mode-specific structured evidence
    views: dict = field(default_factory=dict, repr=False)   # for the HTML report, not JSON

    @property
    def recommended(self) -> Fix | None:
        """The first fix that a replay verified fits (snapshot mode), else None."""
        return next((f for f in self.fixes if f.verified and f.fits), None)

    def __str__(self) -> str:
        return to_text(self)

    def json(self) -> str:
        return to_json(self)

    def html(self) -> str:
        """A self-contained HTML page (inline SVG and CSS, no script, no network)."""
        return to_html(self)

    def _repr_html_(self) -> str:
        return to_html(self, fragment=True)

    def as_dict(self) -> dict:
        """The JSON form (docs/DOCTOR.md, "JSON schema"): ``schema_version`` first, then every
        field but ``views``; fixes as plain dicts; a kind of None is "unknown"."""
        out = {"schema_version": SCHEMA_VERSION}
        # the fields meant, each converted on its own: ``views`` (the whole recording and its
        # timeline, millions of objects) is never copied, as dataclasses.asdict(self) did
        for f in fields(self):
            if f.name != "views":
                out[f.name] = _plain(getattr(self, f.name))
        if out["kind"] is None:
            out["kind"] = "unknown"
        rec = self.recommended
        out["recommended"] = None if rec is None else rec.name
        return out


def _plain(value):
    """``value`` with dataclasses as dicts (what ``dataclasses.asdict`` makes of a field)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value

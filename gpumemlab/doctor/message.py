"""Read a pasted "CUDA out of memory" message: every form PyTorch has printed, back to 1.x.

The forms follow the format strings of ``DeviceCachingAllocator::malloc`` in
c10/cuda/CUDACachingAllocator.cpp over its history (sizes from c10 ``format_size``: "N bytes",
or two decimals of KiB, MiB or GiB):

* 1.0-1.3: ``Tried to allocate X (GPU d; T total capacity; A already allocated; F free; R cached)``
* 1.4-2.0: the same with ``R reserved in total by PyTorch)``, an ``L allowed;`` piece before R when
  a memory fraction is set, and from 1.10 the hint "If reserved memory is >> allocated memory try
  setting max_split_size_mb to avoid fragmentation."
* 2.1 on: ``Tried to allocate X. GPU d has a total capacity of T of which F is free.`` then one
  ``Process N has M memory in use.`` per other process and ``Including non-PyTorch memory, this
  process has P memory in use.`` (when NVML answers), ``L allowed;`` (a fraction), ``Of the
  allocated memory A is allocated by PyTorch, [with G allocated in private pools (e.g., CUDA
  Graphs), ]and U is reserved by PyTorch but unallocated.`` and a hint (2.1 spelled "capacty" and
  hinted max_split_size_mb; later ones hint ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``,
  newest ``PYTORCH_ALLOC_CONF``).
* ``Tried to allocate more than 1EB memory.`` for absurd requests; ROCm builds say "HIP".

X is the allocation c10 tried to make (``get_allocation_size`` of the rounded request: a 2 MiB or
20 MiB segment for small requests), not the tensor's own size. Every figure keeps the precision
the text printed (half a unit in the last decimal); nothing missing is guessed.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["NotAnOOMMessage", "OOMMessage", "parse_message"]

_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "PiB": 1 << 50, "EiB": 1 << 60}


def _squashed(pattern: str) -> re.Pattern:
    """Patterns are written with spaces for reading and matched on the text with every
    whitespace removed, so a message wrapped anywhere, even inside a word or number, still reads."""
    return re.compile(pattern.replace(" ?", "").replace(" ", ""))


_SIZE = r"(\d+(?:\.\d+)?) ?(bytes|[KMGTPE]iB)"
_HEAD = _squashed(r"\b(CUDA|HIP|XPU|MPS)? [Oo]ut of memory\. Tried to allocate "
                  r"(?:" + _SIZE + r"|(more than 1EB memory))")
# the exception's name is read from the text with spaces kept (squashed, it would merge with the
# word before it); a message wrapped inside the name simply has none
_EXCEPTION = re.compile(r"([\w.]*(?:OutOfMemoryError|RuntimeError))\s*:\s*(?:CUDA|HIP|XPU|MPS)?"
                        r"\s*[Oo]ut of memory")
_FIELDS = {  # name: the pattern that prints it (1.x spelling | 2.x spelling)
    "device": _squashed(r"\(GPU (\d+);|GPU (\d+) has a total capac"),
    "total": _squashed(_SIZE + r" total capacity|has a total capac(?:i)?ty of " + _SIZE),
    "free": _squashed(_SIZE + r" free;|of which " + _SIZE + r" is free"),
    "allocated": _squashed(_SIZE + r" already allocated|Of the allocated memory " + _SIZE
                           + r" is allocated by PyTorch"),
    "reserved": _squashed(_SIZE + r" (?:reserved in total by PyTorch|cached)\)"),
    "unallocated": _squashed(_SIZE + r" is reserved by PyTorch but unallocated"),
    "private_pools": _squashed(r"with " + _SIZE + r" allocated in private pools"),
    "allowed": _squashed(_SIZE + r" allowed;"),
    "this_process": _squashed(r"this process has " + _SIZE + r" memory in use"),
}
_OTHER_PROCESS = _squashed(r"Process (\d+) has " + _SIZE + r" memory in use")
_HINTS = (
    ("max_split_size_mb", _squashed(r"try setting max_split_size_mb")),
    ("expandable_segments", _squashed(r"try setting PYTORCH_\w*ALLOC_CONF=expandable_segments:True")),
)
_BODY_END = _squashed(r"Traceback \(most recent call last\)|During handling of the above")


class NotAnOOMMessage(ValueError):
    """The text holds no CUDA/HIP out-of-memory message."""


@dataclass
class Figure:
    """One size as the message printed it: ``bytes`` and its rounding (half a printed unit)."""

    text: str
    bytes: int
    precision_bytes: int


@dataclass
class OOMMessage:
    """What a message says, field by field (None where it does not say).

    ``form`` is "1.x" (parenthesised), "2.x" (sentences) or "exa" (more than 1 EB);
    ``other_processes`` maps a process id to the bytes it held; ``missing`` names the fields a
    partial message lacked; ``hint`` the setting PyTorch's own hint line suggested.
    """

    form: str
    backend: str
    exception: str | None
    requested: Figure | None
    device: int | None = None
    total: Figure | None = None
    free: Figure | None = None
    allocated: Figure | None = None
    reserved: Figure | None = None
    unallocated: Figure | None = None
    private_pools: Figure | None = None
    allowed: Figure | None = None
    this_process: Figure | None = None
    other_processes: dict = field(default_factory=dict)
    hint: str | None = None
    messages_found: int = 1
    missing: list = field(default_factory=list)
    text: str = ""


def _figure(number: str, unit: str) -> Figure:
    scale = _UNITS[unit]
    decimals = len(number.split(".")[1]) if "." in number else 0
    value = round(float(number) * scale)
    precision = 0 if unit == "bytes" else round(scale * 0.5 * 10 ** -decimals)
    return Figure(f"{number} {unit}", value, precision)


def parse_message(text: str) -> OOMMessage:
    """Read the last out-of-memory message in ``text`` (a traceback, a log, or the bare line).

    Raises:
        NotAnOOMMessage: when ``text`` holds none, saying what was looked for.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected the message as text, got {type(text).__name__}")
    flat = " ".join(text.split())
    squashed = "".join(text.split())      # terminals and logs wrap long lines anywhere
    heads = list(_HEAD.finditer(squashed))
    if not heads:
        raise NotAnOOMMessage(
            "not a CUDA out-of-memory message: looked for PyTorch's \"CUDA out of memory. Tried "
            "to allocate ...\" (or HIP/XPU), as printed by torch.OutOfMemoryError or RuntimeError")
    head = heads[-1]
    names = list(_EXCEPTION.finditer(flat))
    exception = names[-1].group(1) if len(names) == len(heads) else None
    backend = head.group(1) or ""
    shown = flat[flat.lower().rfind("ut of memory") - 6:][:1500].strip()
    if head.group(4):
        return OOMMessage(form="exa", backend=backend, exception=exception,
                          requested=Figure("more than 1EB", 1 << 60, 0),
                          messages_found=len(heads), text=shown[:80])
    body = squashed[head.end():head.end() + 2000]
    stop = _BODY_END.search(body)
    body = body[: stop.start()] if stop else body
    form = "1.x" if body.startswith("(GPU") else "2.x" if body.startswith(".") else "unknown"
    msg = OOMMessage(form=form, backend=backend, exception=exception,
                     requested=_figure(head.group(2), head.group(3)), messages_found=len(heads))
    for name, pattern in _FIELDS.items():
        m = pattern.search(body)
        if m is None:
            continue
        groups = [g for g in m.groups() if g is not None]
        if name == "device":
            msg.device = int(groups[0])
        else:
            setattr(msg, name, _figure(groups[0], groups[1]))
    for m in _OTHER_PROCESS.finditer(body):
        msg.other_processes[int(m.group(1))] = _figure(m.group(2), m.group(3))
    for name, pattern in _HINTS:
        if pattern.search(body):
            msg.hint = name
    stop = re.search(r"Traceback \(most recent call last\)|During handling of the above", shown)
    msg.text = shown[: stop.start()].strip() if stop else shown
    wanted = ["device", "total", "free", "allocated"]
    wanted.append("unallocated" if msg.form == "2.x" else "reserved")
    msg.missing = [name for name in wanted if getattr(msg, name) is None]
    return msg

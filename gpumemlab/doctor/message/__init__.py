"""Read a pasted out-of-memory message: every form PyTorch has printed, on CUDA, ROCm, XPU and MPS.

The native caching allocator's forms follow ``DeviceCachingAllocator::malloc`` in
c10/cuda/CUDACachingAllocator.cpp over its history (sizes from c10 ``format_size``: "N bytes", or
two decimals of KiB, MiB or GiB); ROCm builds are the same code run through hipify, so they say
"HIP" and name ``PYTORCH_HIP_ALLOC_CONF``:

* 1.0-1.3: ``Tried to allocate X (GPU d; T total capacity; A already allocated; F free; C cached)``
  where C is ``amount_cached - amount_allocated``: reserved *minus* allocated, so reserved = A + C;
* 1.4-2.0: ``... R reserved in total by PyTorch)``, an ``L allowed;`` piece before R under a
  memory fraction, and from 1.10 the hint "If reserved memory is >> allocated memory try setting
  max_split_size_mb to avoid fragmentation.";
* 2.1 on: ``Tried to allocate X. GPU d has a total capacity of T of which F is free.``, one
  ``Process N has M memory in use.`` per other process, ``Including non-PyTorch memory, this
  process has P memory in use.``, ``L allowed;``, ``Of the allocated memory A is allocated by
  PyTorch, [with G allocated in private pools (e.g., CUDA Graphs), ]and U is reserved by PyTorch
  but unallocated.`` and a hint (2.1 spelled "capacty"); ``Tried to allocate more than 1EB memory.``
* XPU (c10/xpu/XPUCachingAllocator.cpp): the 2.1 sentences, without "of which F is free" in the
  first releases, ending "Please use `empty_cache` ..."; Intel's extension (IPEX) printed the
  1.4 form without a free figure, and ``Current platform can NOT allocate memory block with size
  larger than 4GB! Tried to allocate X (GPU  d; ...)`` for its per-allocation limit;
* cudaMallocAsync (c10/cuda/CUDAMallocAsyncAllocator.cpp): ``Allocation on device d would exceed
  allowed memory. (out of memory)`` then ``Currently allocated : A``, ``Requested : X``, ``Device
  limit : T``, ``Free (according to CUDA): F``, ``PyTorch limit (set by user-supplied memory
  fraction) : L`` (L is SIZE_MAX when no fraction is set); logs often keep only the first line;
* MPS (aten/src/ATen/mps/MPSAllocator.mm): ``MPS backend out of memory (MPS allocated: H, other
  allocations: O[, max allowed: M]). Tried to allocate X on private|shared pool.`` (older
  releases printed "GB"/"MB"/"KB" for binary multiples).

X is what the allocator tried to get (for c10: the rounded request or a whole 2 MiB / 20 MiB
segment), not the tensor's own size. Every figure keeps the precision the text printed (half a
unit in the last decimal); nothing missing is guessed. Parsing is linear in the text's length.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from .text import clean, exception_name, squash

__all__ = ["NotAnOOMMessage", "OOMMessage", "Figure", "parse_message", "LOOKED_FOR"]

_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "PiB": 1 << 50, "EiB": 1 << 60, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30,
          "TB": 1 << 40}
_SIZE = r"(\d+(?:\.\d+)?)(bytes|[KMGTPE]iB|[KMGT]B)"
# every head starts with a literal word, so finding them all is one linear scan
_HEADS = {
    "native": re.compile(r"(CUDA|HIP|XPU)?[Oo]utofmemory\.?Triedtoallocate(?:" + _SIZE
                         + r"|(morethan1EBmemory))"),
    # a paste that starts at "Tried to allocate X (GPU 0; ..." or "Tried to allocate X. GPU 0 has"
    "mid": re.compile(r"(CUDA|HIP|XPU)?Triedtoallocate(?:" + _SIZE
                      + r"|(morethan1EBmemory))(?=\(GPU|\.GPU)"),
    "per_allocation_limit": re.compile(r"CurrentplatformcanNOTallocatememoryblockwithsizelarger"
                                       r"than(\d+)GB!?Triedtoallocate" + _SIZE),
    "mps": re.compile(r"MPSbackendoutofmemory\(MPSallocated:" + _SIZE + r"(?:,otherallocations:"
                      + _SIZE + r")?(?:,maxallowed:" + _SIZE + r")?\)\.?(?:Triedtoallocate" + _SIZE
                      + r"on(private|shared)pool)?"),
    # the device index may be printed as a character (see _read_async); ComfyUI's error report
    # puts the first line in a markdown field ("**Exception Message:** Allocation on device")
    "cudaMallocAsync": re.compile(r"(OutOfMemoryError:|ExceptionMessage:)?Allocationondevice"
                                  r"([\x01-\x1b]|\d*)(wouldexceedallowedmemory)?"),
    # PyTorch 0.1-0.4 (THC): "cuda runtime error (2) : out of memory at .../THC/...", or
    # THCudaCheck's "THCudaCheck FAIL file=... line=58 error=2 : out of memory"
    "thc": re.compile(r"(cuda|hip)runtimeerror\(2\):?outofmemory|line=\d+error=2:outofmemory"),
    # the first sentence alone (a log cut short) or the runtime's own "CUDA error: out of memory"
    "bare": re.compile(r"(CUDA|HIP|XPU)(error:)?outofmemory"),
}
# a full message outranks a cut one, which outranks a bare "CUDA out of memory" (often prose);
# among equals the last in the text is read
_PRIORITY = {"native": 3, "mid": 3, "per_allocation_limit": 3, "mps": 3, "cudaMallocAsync": 2,
             "thc": 2, "bare": 1}
_FULL_BODY = re.compile(r"\(GPU|\.GPU|\.XPU")
_INSIDE_NATIVE = re.compile(r"(?:outofmemory\.?|\d+GB!?)$")
LOOKED_FOR = (
    "looked for PyTorch's \"CUDA out of memory. Tried to allocate ...\" (or HIP/XPU, or 0.x's "
    "\"cuda runtime error (2) : out of memory\"), the cudaMallocAsync \"Allocation on device ... "
    "would exceed allowed memory\", Apple's \"MPS backend out of memory\", and the memory errors "
    "of JAX/XLA (and Elixir's EXLA), TensorFlow, llama.cpp, candle, numba, vLLM, SGLang, TGI, "
    "NCCL, CUDA initialisation and pinned host memory")
_FIELDS = {  # name: pattern on the squashed body (1.x spelling | 2.x spelling)
    "device": re.compile(r"\(GPU(\d+);|GPU(\d+|[\x01-\x1b])hasatotalcapac"),
    "total": re.compile(_SIZE + r"totalcapacity|hasatotalcapac(?:i)?tyof" + _SIZE
                        + r"|Devicelimit:" + _SIZE),
    "free": re.compile(_SIZE + r"free;|ofwhich" + _SIZE + r"isfree|Free\(accordingtoCUDA\):"
                       + _SIZE),
    "allocated": re.compile(_SIZE + r"alreadyallocated|Oftheallocatedmemory" + _SIZE
                            + r"isallocatedbyPyTorch|Currentlyallocated:" + _SIZE),
    "reserved": re.compile(_SIZE + r"reservedintotalbyPyTorch\)?"),  # ")" can be lost
    "cached": re.compile(_SIZE + r"cached(?:\)|$|;)"),
    "unallocated": re.compile(_SIZE + r"isreservedbyPyTorchbutunallocated"),
    "private_pools": re.compile(r"with" + _SIZE + r"allocatedinprivatepools"),
    "allowed": re.compile(_SIZE + r"allowed;"),
    "this_process": re.compile(r"thisprocesshas" + _SIZE + r"memoryinuse"),
    "limit": re.compile(r"PyTorchlimit\(setbyuser-suppliedmemoryfraction\):" + _SIZE),
    "async_requested": re.compile(r"Requested:" + _SIZE),
}
_OTHER_PROCESS = re.compile(r"Process(\d+)has" + _SIZE + r"memoryinuse")
_HINTS = (
    ("max_split_size_mb", re.compile(r"trysettingmax_split_size_mb")),
    ("expandable_segments", re.compile(r"trysetting(PYTORCH_\w{0,8}ALLOC_CONF)=expandable_segm")),
)
_BODY_END = re.compile(r"Traceback\(mostrecentcalllast\)|Duringhandlingoftheabove|"
                       r"Theaboveexceptionwasthedirectcause")
_BODY = 2000               # no form prints more than this after its head (process lines aside)
_SHOWN = 1500
_STOP_SHOWN = re.compile(r"Traceback \(most recent call last\)|During handling of the above")


class NotAnOOMMessage(ValueError):
    """The text holds no out-of-memory message of a form the doctor reads."""


@dataclass
class Figure:
    """One size as the message printed it: ``bytes`` and its rounding (half a printed unit)."""

    text: str
    bytes: int
    precision_bytes: int


@dataclass
class OOMMessage:
    """What a message says, field by field (None where it does not say).

    ``form`` names the format (a key of ``FORMS``); ``backend`` "CUDA", "HIP", "XPU", "MPS" or ""
    (not named); ``allocator`` "native", "cudaMallocAsync", "mps" or "ipex"; ``unallocated`` is
    reserved-but-unallocated as printed (2.1+, XPU) or as 1.0-1.3 printed it ("cached");
    ``limit`` the cap the allocator enforces (MPS "max allowed", cudaMallocAsync's "PyTorch
    limit"); ``other_allocations`` MPS's "other allocations"; ``per_allocation_limit`` the
    largest single allocation a platform message names; ``read``/``missing`` the fields found and
    the ones its form prints but the text lacked; ``hint`` the setting PyTorch's hint suggested,
    ``hint_variable`` the environment variable the hint names.
    """

    form: str
    backend: str
    allocator: str
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
    limit: Figure | None = None
    other_allocations: Figure | None = None
    per_allocation_limit: Figure | None = None
    pool: str | None = None
    other_processes: dict = field(default_factory=dict)
    hint: str | None = None
    hint_variable: str | None = None
    messages_found: int = 1
    read: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    truncated: str | None = None  # why the text stops early, when c10 itself cut it
    text: str = ""
    context: str = ""          # the whole cleaned text: platform clues live around the message
    offset: int = 0            # where the message starts in ``context``


FORMS = {  # form -> the fields its format string prints
    "1.0-1.3": ["device", "total", "allocated", "free", "unallocated"],
    "1.4-2.0": ["device", "total", "allocated", "free", "reserved"],
    "2.1+": ["device", "total", "free", "allocated", "unallocated"],
    "xpu": ["device", "total", "allocated", "unallocated"],
    "ipex": ["device", "total", "allocated", "reserved"],
    "per_allocation_limit": ["device", "total", "allocated", "reserved"],
    "cudaMallocAsync": ["allocated", "requested", "total", "free", "limit"],
    "mps": ["allocated", "other_allocations", "requested"],
    "exa": [],
    "first_sentence": ["requested", "device", "total", "free", "allocated"],
    "runtime_error": ["requested", "device", "total", "free", "allocated"],
    "thc": [],
}


def _figure(number: str, unit: str) -> Figure:
    scale = _UNITS[unit]
    decimals = len(number.split(".")[1]) if "." in number else 0
    value = round(float(number) * scale)
    precision = 0 if unit == "bytes" else round(scale * 0.5 * 10 ** -decimals)
    return Figure(f"{number} {unit}", value, precision)


def _pairs(groups):
    got = [g for g in groups if g is not None]
    return [_figure(got[i], got[i + 1]) for i in range(0, len(got) - 1, 2)]


# each head holds one literal word, its anchor; the start of the head is the start of a short
# prefix that ends with that word (found in a 40-character window before it), and the whole
# pattern is then matched from there: a constant amount of work per anchor, whatever the text
_PREFIXES = {
    "native": ("utofmemory", re.compile(r"(?:CUDA|HIP|XPU)?[Oo]utofmemory\Z")),
    "mps": ("utofmemory", re.compile(r"MPSbackendoutofmemory\Z")),
    "thc": ("utofmemory", re.compile(r"(?:(?:cuda|hip)runtimeerror\(2\):?|line=\d+error=2:)"
                                     r"outofmemory\Z")),
    "bare": ("utofmemory", re.compile(r"(?:CUDA|HIP|XPU)(?:error:)?outofmemory\Z")),
    "mid": ("Triedtoallocate", re.compile(r"(?:CUDA|HIP|XPU)?Triedtoallocate\Z")),
    "per_allocation_limit": ("CurrentplatformcanNOT", re.compile(r"CurrentplatformcanNOT\Z")),
    "cudaMallocAsync": ("Allocationondevice",
                        re.compile(r"(?:OutOfMemoryError:|ExceptionMessage:)?Allocationondevice\Z")),
}
_ANCHORS = tuple(dict.fromkeys(anchor for anchor, _ in _PREFIXES.values()))
_BY_ANCHOR = {a: [(k, pre) for k, (anchor, pre) in _PREFIXES.items() if anchor == a]
              for a in _ANCHORS}


def _last_head(squashed):
    """The last message's head (its kind and match) and how many messages the text holds.

    Each anchor word is found with str.find (a fast scan); for each, every kind that holds that
    word checks a short prefix ending at it and matches its whole pattern from the prefix's
    start, so the work per anchor is bounded and the whole is linear in the text."""
    starts = {}
    for anchor in _ANCHORS:
        at = squashed.find(anchor)
        while at >= 0:
            end = at + len(anchor)
            for kind, prefix in _BY_ANCHOR[anchor]:
                pre = prefix.search(squashed, max(0, at - 40), end)
                if pre is None:
                    continue
                m = _HEADS[kind].match(squashed, pre.start(), end + 400)
                if m is None:
                    continue
                begin = m.start()
                rank = _PRIORITY[kind]
                if kind == "cudaMallocAsync":
                    if not (m.group(1) or m.group(3)):
                        continue    # "Allocation on device" inside some other sentence
                    begin += len(m.group(1) or "")
                elif kind == "mid" and _INSIDE_NATIVE.search(squashed, max(0, begin - 20), begin):
                    continue        # the "Tried to allocate" of a whole message found above
                elif kind in ("native", "mid") and not m.group(4) \
                        and not _FULL_BODY.match(squashed, m.end()):
                    rank = 1.5      # the first sentence only: a fuller message elsewhere wins
                old = starts.get(begin)
                if old is None or rank > old[0]:
                    starts[begin] = (rank, kind, m)
            at = squashed.find(anchor, at + 1)
    if not starts:
        return None, 0
    begin = max(starts, key=lambda b: (starts[b][0], b))
    return (*starts[begin][1:], begin), len(starts)


def _locate(cleaned: str, squashed_head: str) -> int:
    """Where the head (its squashed first characters) starts in the cleaned text: the last
    place whose non-space characters spell it."""
    probe = squashed_head[:20]
    pattern = re.compile(r"\s*".join(re.escape(c) for c in probe))
    start = -1
    for m in pattern.finditer(cleaned):
        start = m.start()
    return max(start, 0)


def parse_message(text: str) -> OOMMessage:
    """Read the last out-of-memory message in ``text`` (a traceback, a log, a markdown paste or
    the bare line).

    Raises:
        NotAnOOMMessage: when ``text`` holds none, saying what was looked for.
    """
    if not isinstance(text, str):
        raise TypeError(f"expected the message as text, got {type(text).__name__}")
    cleaned = clean(text)
    squashed = squash(cleaned)
    found, count = _last_head(squashed)
    if found is None:
        raise NotAnOOMMessage("not an out-of-memory message: " + LOOKED_FOR)
    kind, head, begin = found
    start = _locate(cleaned, squashed[begin:head.end()])
    shown = " ".join(cleaned[start:start + 3 * _SHOWN].split())
    stop = _STOP_SHOWN.search(shown)
    shown = (shown[:stop.start()] if stop else shown)[:_SHOWN].strip()
    body = squashed[begin:head.end() + _BODY]
    stop = _BODY_END.search(body)
    body = body[:stop.start()] if stop else body
    msg = OOMMessage(form="", backend="", allocator="native",
                     exception=exception_name(cleaned, start), requested=None,
                     messages_found=count, text=shown, context=cleaned, offset=start)
    _READERS[kind](msg, head, body[head.end() - begin:])
    msg.read = [k for k in ("requested", "device", "total", "free", "allocated", "reserved",
                            "unallocated", "private_pools", "allowed", "this_process", "limit",
                            "other_allocations") if getattr(msg, k) is not None]
    msg.missing = [k for k in FORMS.get(msg.form, []) if getattr(msg, k, None) is None]
    return msg


def _read_fields(msg, body, names):
    for name in names:
        m = _FIELDS[name].search(body)
        if m is None:
            continue
        if name == "device":
            msg.device = _device(next(g for g in m.groups() if g is not None))
        elif name == "cached":    # 1.0-1.3: c10 printed amount_cached - amount_allocated
            msg.unallocated = _pairs(m.groups())[0]
        elif name == "async_requested":
            msg.requested = _pairs(m.groups())[0]
        else:
            setattr(msg, name, _pairs(m.groups())[0])


# c10::DeviceIndex is an 8-bit integer: some releases streamed it into the message as a character,
# so device 1 prints as byte 0x01 and device 0 as a NUL that ends the C string Python receives
# (fixed for the native allocator in pytorch/pytorch#123984, for cudaMallocAsync in #168369)
_NUL_CUT = ("the text ends where c10 printed the device index as a character: device 0 is a NUL "
            "byte that ends the message, so it prints no figures (a bug of some PyTorch "
            "releases, fixed in pytorch/pytorch#123984 and #168369)")


def _device(text: str) -> int:
    return ord(text) if len(text) == 1 and not text.isdigit() else int(text)


def _read_native(msg, head, body):
    msg.backend = head.group(1) or ""
    if head.group(4):
        msg.form = "exa"
        msg.requested = Figure("more than 1EB", 1 << 60, 0)
        return
    msg.requested = _figure(head.group(2), head.group(3))
    if body.startswith("(GPU"):
        cached = _FIELDS["cached"].search(body) is not None
        has_free = _FIELDS["free"].search(body) is not None
        msg.form = ("1.0-1.3" if cached else "1.4-2.0" if has_free or msg.backend != "XPU"
                    else "ipex")
        if msg.form == "ipex":
            msg.allocator = "ipex"
    elif body.startswith("."):
        msg.form = "xpu" if msg.backend == "XPU" else "2.1+"
    else:
        msg.form = "first_sentence"    # cut right after the request
    _read_fields(msg, body, ["device", "total", "free", "allocated", "reserved", "cached",
                             "unallocated", "private_pools", "allowed", "this_process"])
    for m in _OTHER_PROCESS.finditer(body):
        msg.other_processes[int(m.group(1))] = _figure(m.group(2), m.group(3))
    for name, pattern in _HINTS:
        m = pattern.search(body)
        if m:
            msg.hint = name
            msg.hint_variable = m.groups()[0] if m.groups() else None
    if msg.form == "2.1+" and body.startswith(".GPU") and msg.device is None \
            and msg.total is None:
        msg.device, msg.truncated = 0, _NUL_CUT


def _read_limit(msg, head, body):
    msg.form, msg.backend, msg.allocator = "per_allocation_limit", "XPU", "ipex"
    msg.per_allocation_limit = Figure(f"{head.group(1)} GB", int(head.group(1)) << 30, 0)
    msg.requested = _figure(head.group(2), head.group(3))
    _read_fields(msg, body, ["device", "total", "allocated", "reserved"])


def _read_mps(msg, head, body):
    msg.form, msg.backend, msg.allocator = "mps", "MPS", "mps"
    figs = [head.group(i) for i in range(1, 9)]
    msg.allocated = _figure(figs[0], figs[1])
    msg.other_allocations = _figure(figs[2], figs[3])
    if figs[4] is not None:
        msg.limit = _figure(figs[4], figs[5])
    if figs[6] is not None:
        msg.requested = _figure(figs[6], figs[7])
        msg.pool = head.group(9)


def _read_async(msg, head, body):
    msg.form, msg.backend, msg.allocator = "cudaMallocAsync", "CUDA", "cudaMallocAsync"
    if head.group(3) and head.group(2):
        msg.device = _device(head.group(2))
    elif not head.group(3):          # whatever follows is another line of the log
        msg.device, msg.truncated = 0, _NUL_CUT
    _read_fields(msg, body, ["allocated", "async_requested", "total", "free", "limit"])


def _read_thc(msg, head, body):
    msg.form, msg.backend = "thc", "HIP" if (head.group(1) or "").lower() == "hip" else "CUDA"


def _read_bare(msg, head, body):
    msg.backend = head.group(1)
    # "CUDA error: out of memory" is the runtime's own error (a cudaMalloc outside the caching
    # allocator: a library workspace, the context, NCCL): it never prints figures
    msg.form = "runtime_error" if head.group(2) else "first_sentence"


_READERS = {"native": _read_native, "mid": _read_native, "per_allocation_limit": _read_limit,
            "mps": _read_mps, "cudaMallocAsync": _read_async, "thc": _read_thc,
            "bare": _read_bare}

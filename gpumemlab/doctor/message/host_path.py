"""Pinned host memory's failures, read from a paste: PyTorch's caching host allocator
(``at::cuda::CachingHostAllocator``, aten/src/ATen/cuda/CachingHostAllocator.cpp) failing in
``cudaHostAlloc``/``cudaHostRegister``, and what is left when pinning takes the host down.

PyTorch prints no OOM message of its own for the host: ``C10_CUDA_CHECK`` around ``cudaHostAlloc``
raises ``RuntimeError: CUDA error: out of memory`` (or ``invalid argument`` when the driver refuses
the size), with no retry and without giving back its cached blocks first. Where it surfaces says
that it was the host: ``torch.empty(..., pin_memory=True)``, ``tensor.pin_memory()``, a
DataLoader's ``Caught RuntimeError in pin memory thread for device 0`` with torch's
``utils/data/_utils/pin_memory`` module in the traceback, ``cudaHostAlloc`` or
``CachingHostAllocator`` named; or the Linux OOM killer (``Killed``, ``Out of memory: Killed
process``) after a program pinned memory, since pinned pages cannot be swapped out. The
diagnosis names the host, the rounding the allocator adds (each request up to a power of two,
:func:`~gpumemlab.allocator.host.explain_host_oom`, computed for the size the text prints when it
prints one) and the settings that cap it.
"""
from __future__ import annotations

import re

from gpumemlab.allocator.host import explain_host_oom
from gpumemlab.units import format_size

from ..diagnosis import Diagnosis, Fix
from .text import as_written, clean, squash

__all__ = ["diagnose_host_path", "FRAMEWORK", "FORM"]

FRAMEWORK, FORM = "pytorch_pinned_host", "pinned_host"
_SIZE = r"(\d+(?:\.\d+)?)(bytes|[KMGTPE]iB)"
_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
          "PiB": 1 << 50, "EiB": 1 << 60}
# where the text shows PyTorch's host path (patterns on the squashed paste, all literal-led)
_HOST_PATH = re.compile(r"pinmemorythread|_pin_memory_loop|pin_memory\.py|\.pin_memory\(|"
                        r"pin_memory=True|cudaHostAlloc|cudaHostRegister|CachingHostAllocator|"
                        r"pinnedmemory|_host_emptyCache|empty_host_cache", re.I)
_FAILURES = (  # (key, pattern, what it means)
    ("oom", re.compile(r"CUDAerror:outofmemory|cudaErrorMemoryAllocation", re.I),
     "cudaHostAlloc could not pin the memory (CUDA error: out of memory): the host's RAM or its "
     "locked-memory limit ran out, not the GPU"),
    ("invalid", re.compile(r"CUDAerror:invalidargument", re.I),
     "the driver refused the pinned allocation (CUDA error: invalid argument), as it does for a "
     "pinned size the host or its limits cannot map"),
    ("oom_killer", re.compile(r"Outofmemory:Killedprocess|oom-kill|killedbysignal:Killed|"
                              r"\bKilled\b", re.I),
     "the Linux OOM killer ended the process: pinned pages cannot be swapped out, so every "
     "pinned byte is RAM the rest of the machine loses"),
    ("thread", re.compile(r"CaughtRuntimeErrorinpinmemorythread", re.I),
     "the DataLoader's pin-memory thread failed while copying a batch into pinned memory"),
)
_DEVICE_MESSAGE = re.compile(r"Triedtoallocate" + _SIZE + r"[^\n]{0,40}?(?:\(GPU|\.GPU)")
_FOREIGN_HOST = re.compile(r"tensorflow|stream_executor|xla/", re.I)   # named in foreign.py
# the kit's own HostOutOfMemoryError: "(cudaHostAlloc of X for a pinned request of Y)"
_KIT_SIZES = re.compile(r"cudaHost(?:Alloc|Register)of" + _SIZE + r"forapinnedrequestof" + _SIZE)
_EXAMPLE = int(20.4 * (1 << 30))         # sgl-project/sglang#36562's buffer, for the rule's example


_SIZES = ("requested", "block_size", "rounding_waste")       # of the request: from the paste only
_SETTINGS = ("pinned_max_round_threshold_mb", "pinned_max_cached_size_mb")


def _bytes(number, unit):
    return int(round(float(number) * _UNITS[unit]))


def diagnose_host_path(text: str, *, source: str = "message") -> Diagnosis | None:
    """The diagnosis of a pinned-host-memory failure in ``text``, or None when the text does not
    show PyTorch's host path with a failure (or holds a full device OOM message, which the
    device reading explains)."""
    cleaned = clean(text)
    squashed = squash(cleaned)
    path = _HOST_PATH.search(squashed)
    if path is None or _DEVICE_MESSAGE.search(squashed) or _FOREIGN_HOST.search(squashed):
        return None
    failures = [(key, what, as_written(cleaned, *m.span())) for key, pattern, what in _FAILURES
                if (m := pattern.search(squashed))]
    if not failures:
        return None
    sizes = _KIT_SIZES.search(squashed)
    requested = _bytes(*sizes.group(3, 4)) if sizes else None
    facts = explain_host_oom(requested if requested is not None else _EXAMPLE)
    # a size the paste does not print is the rule's example, said as one and never the user's
    rounding = (" ".join(facts["lines"][:2]) if requested is not None else
                f"The host allocator rounds each pinned request up to a power of two unless "
                f"pinned_max_round_threshold_mb is below it; the paste prints no size, so for "
                f"example, a {format_size(_EXAMPLE)} buffer would pin "
                f"{format_size(facts['block_size'])}, {format_size(facts['rounding_waste'])} of "
                "it never used.")
    summary = ("Pinned host memory, not the GPU: " + "; ".join(w for _k, w, _m in failures)
               + ". " + rounding)
    evidence = ([f"the host path: {as_written(cleaned, *path.span())!r}"]
                + [f"{k}: {m[:80]!r}" for k, _w, m in failures])
    if requested is not None:
        evidence.append(f"a pinned request of {format_size(requested)} asked "
                        f"{format_size(facts['block_size'])} of cudaHostAlloc")
    # a threshold below the request (so that it is pinned exactly), at most 64 MiB so that small
    # staging buffers keep their power-of-two buckets
    mb = 64 if requested is None else max(1, min(64, (requested - 1) >> 20))
    conf = f"pinned_max_round_threshold_mb:{mb}"
    fixes = [
        Fix("pinned_max_round_threshold_mb", "requests above the threshold are pinned at their "
            "exact size instead of the next power of two (PyTorch 2.13+); smaller ones keep their "
            "reusable buckets", how=f"PYTORCH_ALLOC_CONF={conf}", alloc_conf=conf),
        Fix("host_empty_cache", "freed pinned blocks stay cached and pinned: the host allocator "
            "never gives them back by itself, not even when a cudaHostAlloc fails",
            how="torch.accelerator.empty_host_cache() before a big pin (torch._C._host_emptyCache() "
            "on an older torch); or cap the cache with "
            "PYTORCH_ALLOC_CONF=pinned_max_cached_size_mb:<MiB>"),
        Fix("pin_less", "each DataLoader worker's prefetched batch is pinned by the pin-memory "
            "thread", how="DataLoader(..., pin_memory=False), or fewer num_workers and a smaller "
            "prefetch_factor; smaller pinned buffers in an offload or KV-cache tier"),
        Fix("host_limits", "the locked-memory budget is the host's RAM within its limits",
            how="free RAM (free -g), ulimit -l, a container's memory limit or WSL2's "
            ".wslconfig memory"),
    ]
    details = {"framework": FRAMEWORK, "form": FORM, "failures": [k for k, _w, _m in failures],
               "host": {k: facts[k] if requested is not None or k in _SETTINGS else None
                        for k in _SIZES + _SETTINGS},
               "host_requested_from_text": requested is not None,
               "host_example": None if requested is not None else
               {k: facts[k] for k in _SIZES}}
    return Diagnosis(mode="message", source=source, kind="not_pytorch_allocator",
                     summary=summary, requested_bytes=requested, evidence=evidence,
                     fixes=fixes, details=details,
                     cannot_tell=["the device's memory: this failure is on the host",
                                  "how much was pinned and cached before it (record it with "
                                  "torch.cuda.memory.host_memory_stats())"])

"""Fixes for an OOM read from a message, fitted to its kind and its platform.

Nothing is recommended that cannot help: no allocator setting for a request larger than the card,
no setting the text says is already on, no expandable segments where the platform has none
(Windows, MPS, XPU, the cudaMallocAsync backend; ROCm only from PyTorch 2.11 built against ROCm
7.0 or newer), settings under the variable this platform's allocator reads
(``PYTORCH_HIP_ALLOC_CONF`` on ROCm, ``PYTORCH_XPU_ALLOC_CONF`` on recent XPU builds), MPS's own
remedies on MPS, and platform fixes (WDDM shared memory, WSL's memory limit, per-allocation
limits, the driver) for ``unexplained``; ``unknown`` still gets "hold less at the peak" (and a
platform's per-allocation limit when the request reaches it). Advice fits the evidence: no action aimed at the
process that is this very process, another framework's preallocation only when the text shows
that framework, a per-process cap only when several processes share the card, a bigger card
always more than this one. :func:`fixes` returns the ranked fixes and one line per
fix it left out, saying why.
"""
from __future__ import annotations

import re

from gpumemlab.units import format_size

from ..diagnosis import Fix
from .platform import per_allocation_fix

__all__ = ["fixes"]

_NATIVE_ONLY = "expandable_segments, max_split_size_mb, roundup_power2_divisions, " \
               "garbage_collection_threshold"


def _s(n):
    return format_size(n)


def _conf(platform, setting):
    var = platform.conf_variable or "PYTORCH_CUDA_ALLOC_CONF"
    return f"export {var}={setting}"


def _expandable(platform, msg=None):
    why = ("the cached free memory is in pieces; with expandable segments each stream's memory "
           "is one segment that grows and shrinks by pages, so freed pages are remapped where "
           "the next request needs them instead of staying stranded")
    for caveat in platform.caveats("expandable_segments"):
        why += "; " + caveat
    if msg is not None and msg.form in ("1.0-1.3", "1.4-2.0"):
        why += ("; this message's form is PyTorch 2.0 or older, which has no expandable segments "
                "(they came in 2.1): upgrade first")
    return Fix("expandable_segments", why, how=_conf(platform, "expandable_segments:True"),
               code="torch.cuda.memory._set_allocator_settings('expandable_segments:True')",
               alloc_conf="expandable_segments:True")


# c10 (CUDACachingAllocator.cpp): requests up to kSmallSize (1 MiB) go to the small pool, whose
# 2 MiB segments are split whatever max_split_size says; max_split_size (at least kLargeBuffer,
# 20 MiB) only keeps large-pool blocks of that size whole for requests of at least that size
_SMALL_SIZE, _SMALL_BUFFER, _LARGE_BUFFER = 1 << 20, 2 << 20, 20 << 20


def max_split_applies(msg, R) -> str | None:
    """None when max_split_size can help this allocation of ``R`` bytes (as printed), else why
    not. Forms from 1.4 print c10's alloc_size (2 MiB for a small-pool request, a whole 20 MiB
    segment for one of 1-10 MiB); 1.0-1.3 printed the rounded request, and read no allocator
    settings at all (PYTORCH_CUDA_ALLOC_CONF came with max_split_size_mb in 1.10)."""
    if msg.form == "1.0-1.3":
        return ("PyTorch 1.0-1.3 (this message's form) reads no PYTORCH_CUDA_ALLOC_CONF: the "
                "variable came with max_split_size_mb in 1.10")
    if R <= _SMALL_BUFFER:
        return (f"the {_s(R)} allocation is the small pool's (requests up to 1 MiB, served from "
                f"2 MiB segments), where max_split_size does not apply")
    if R <= _LARGE_BUFFER:
        return (f"max_split_size is at least 20 MiB and keeps large blocks whole only for "
                f"requests at least that big; this {_s(R)} allocation is smaller (a 20 MiB "
                f"segment is what c10 asks for a request of 1-10 MiB)")
    return None


def _max_split(platform, R, msg=None):
    split_mb = max(_LARGE_BUFFER >> 20, 1 << ((R >> 20).bit_length() - 1))
    why = (f"cached blocks of at least max_split_size are never split for smaller requests, "
           f"so big free blocks stay whole for big requests like this {_s(R)} one (a starting "
           f"value: a snapshot lets the doctor search and verify one)")
    for caveat in platform.caveats("max_split_size_mb"):
        why += "; " + caveat
    if msg is not None and msg.form == "1.4-2.0" and msg.hint is None:
        # 1.10 added max_split_size_mb, PYTORCH_CUDA_ALLOC_CONF and the hint line together
        why += ("; this message has the 1.4-2.0 form without the hint line that came with the "
                "setting in 1.10, so it may be from 1.4-1.9, which reads no "
                "PYTORCH_CUDA_ALLOC_CONF: check torch.__version__ first (or the paste cut the "
                "hint)")
    return Fix("max_split_size_mb", why, how=_conf(platform, f"max_split_size_mb:{split_mb}"),
               alloc_conf=f"max_split_size_mb:{split_mb}")


def _smaller(short):
    return Fix("reduce_peak_memory",
               f"the program must hold less at its peak: at least {_s(short)} less for this "
               f"allocation" if short and short > 0 else "the program must hold less at its peak",
               how="smaller batch or sequence length; activation checkpointing "
                   "(torch.utils.checkpoint); bf16/fp16 autocast; fewer optimizer states "
                   "(fused/8-bit optimizers, sharding)")


def _platform_fixes(platform, msg, R):
    """Each found platform's own fixes (message/platform.py), the message's per-allocation limit,
    then the driver."""
    out = platform.fixes(msg, R)
    if msg.per_allocation_limit is not None:
        out.append(per_allocation_fix(msg.per_allocation_limit.bytes))
    out.append(Fix("driver_bug",
                   "the driver had room and refused anyway: a driver or runtime bug is possible",
                   how="update the GPU driver; reproduce with a single large torch.empty of the "
                       "same size; report the figures to the driver's tracker"))
    return out


# another framework in the same process or beside it: only then is its preallocation advice due
_FRAMEWORK_WORDS = re.compile(r"\bjax(?:lib)?\b|XLA_PYTHON|xla_extension|\btensorflow\b|"
                              r"\btf\.config\b", re.I)


def _outside_fixes(f, msg, platform):
    """Fixes for memory held outside PyTorch, fitted to what the text shows:
    other processes are named (never the one that is this process), another framework's
    preallocation only when the text shows that framework, a per-process cap only when several
    processes share the card."""
    out = []
    pids = list(f.get("other_pids") or ())
    if pids:
        out.append(Fix("other_processes",
                       f"process{'es' if len(pids) > 1 else ''} {', '.join(map(str, pids))} "
                       f"hold{'' if len(pids) > 1 else 's'} {_s(f.get('others') or 0)} on this "
                       f"GPU: with that memory held this allocation cannot fit",
                       how="nvidia-smi shows them; stop them or wait for them, or pick a free "
                           "GPU with CUDA_VISIBLE_DEVICES"))
    text = msg.context[max(0, msg.offset - 64_000):msg.offset + 16_000]
    framework = _FRAMEWORK_WORDS.search(text)
    if framework:
        out.append(Fix("other_framework_preallocation",
                       f"the text shows another framework ({framework.group(0)!r}); JAX and "
                       f"TensorFlow reserve most of the card for themselves by default",
                       how="JAX: XLA_PYTHON_CLIENT_PREALLOCATE=false or "
                           "XLA_PYTHON_CLIENT_MEM_FRACTION; TensorFlow: "
                           "tf.config.experimental.set_memory_growth"))
    if f.get("outside") is not None:
        out.append(Fix("non_pytorch_memory",
                       f"{_s(f['outside'])} of the card is held outside PyTorch (not by this "
                       f"process's caching allocator): other processes, this process's CUDA "
                       f"context and library workspaces (cuBLAS, cuDNN, NCCL), the desktop",
                       how="nvidia-smi --query-compute-apps=pid,used_memory shows who holds it; "
                           "torch.cuda.mem_get_info() before the model loads shows what is left "
                           "for this process"))
    out.extend(platform.outside_fixes(msg))
    if pids:
        out.append(Fix("share_the_card", "several processes share the card: cap each so they fit "
                       "together (the fraction is of the whole card, per process)",
                       code="torch.cuda.set_per_process_memory_fraction(0.5)  # per process"))
    return out


def fixes(kind: str, decision: dict, f: dict, msg, platform) -> tuple[list, list]:
    """Ranked fixes for ``kind`` and lines naming each fix left out and why: the platform ranks
    them by what it supports (:meth:`~gpumemlab.doctor.message.platform.Platform.rank`)."""
    found, left_out = _fixes(kind, decision, f, msg, platform)
    return platform.rank(found), left_out


def _fixes(kind, decision, f, msg, platform):
    R = f.get("requested") or 0
    T = f.get("total")
    left_out = []
    if platform.has("cudaMallocAsync"):
        left_out.append(f"{_NATIVE_ONLY}: the cudaMallocAsync backend reads none of them (only "
                        f"the native caching allocator does)")
    if kind == "unknown":
        # a platform's own limit still applies to a request over it (an Intel GPU's 4 GiB); and
        # whatever the kind, a program that holds less at its peak needs less
        limit = [x for x in platform.fixes(msg, R) if x.name == "per_allocation_limit"]
        if platform.has("mps"):
            return limit + [_mps_smaller(R)], left_out
        return limit + [_smaller(None)], left_out
    if platform.has("mps"):
        return _mps(kind, decision, f, platform), ["CUDA allocator settings (PYTORCH_CUDA_ALLOC_CONF): "
                                         "MPS has its own allocator and reads none of them"]
    if kind == "unexplained":
        found = _platform_fixes(platform, msg, R)
        if decision["rule"] == "per_allocation_limit":
            return [x for x in found if x.name != "driver_bug"], [
                "allocator settings: the platform's per-allocation limit refused, not the "
                "allocator"]
        return found, ["allocator settings: the driver had room, so no allocator setting "
                       "changes this"]
    bigger = _bigger(kind, decision, R, T)
    if decision["rule"] == "request_larger_than_card":
        left_out.append("allocator settings and empty_cache(): one allocation larger than the "
                        "card cannot fit whatever the allocator does")
        return [Fix("make_the_allocation_smaller",
                    f"one tensor of {_s(R)} cannot live on this card: split the work that "
                    f"makes it", how="smaller batch or resolution; shard the model or the "
                                     "tensor; lower precision; check the shape is intended"),
                bigger], left_out
    if decision["rule"] == "over_memory_fraction":
        return [Fix("raise_memory_fraction", "the cap set by set_per_process_memory_fraction "
                    "(or the backend's limit) stopped the allocation before the card did",
                    code="torch.cuda.set_per_process_memory_fraction(0.95)"),
                _smaller(None)], left_out
    settings = []
    if not platform.has("cudaMallocAsync"):
        if platform.expandable_segments == "no":
            left_out.append(f"expandable_segments: not available on "
                            f"{platform.without_expandable}")
        elif "expandable_segments" in platform.settings_on:
            left_out.append("expandable_segments: the text says it is already on")
        else:
            settings.append(_expandable(platform, msg))
        if "max_split_size_mb" in platform.settings_on:
            left_out.append(f"max_split_size_mb: the text says "
                            f"{platform.settings_on['max_split_size_mb']} is already set")
        elif kind == "fragmentation":
            why_not = max_split_applies(msg, R)
            if why_not:
                left_out.append(f"max_split_size_mb: {why_not}")
            else:
                settings.append(_max_split(platform, R, msg))
    if msg.form in ("1.0-1.3", "1.4-2.0"):
        # that release has no expandable segments: what it has comes first
        settings.sort(key=lambda x: x.name == "expandable_segments")
    not_empty = Fix("not_empty_cache",
                    "empty_cache() would not help: before raising, the allocator already "
                    "released every cached segment that was wholly free and retried; what stays "
                    "cached is free space inside segments that also hold live tensors")
    if kind == "outside_pytorch":
        return _outside_fixes(f, msg, platform), left_out
    if kind == "fragmentation":
        return settings + [_smaller(None), not_empty], left_out
    short = decision.get("shortfall")
    if decision["rule"] == "no_piece_big_enough":
        return settings + [_smaller(None), bigger, not_empty], left_out
    if settings:
        left_out.append("allocator settings: even as one piece the free memory is short of "
                        "the request, so they cannot make it fit")
    if platform.has("cudaMallocAsync"):
        return [_smaller(short), bigger], left_out
    return [_smaller(short), bigger, not_empty], left_out


def _bigger(kind, decision, R, T):
    """A bigger card: one with more than this card (and, when the shortfall is known, at least
    this card plus it); never a card of this card's own size."""
    short = decision.get("shortfall")
    if decision["rule"] == "request_larger_than_card":
        return Fix("bigger_card", f"a card with more than {_s(R)} of memory: this one request is "
                                  f"larger than the card")
    if T and short and short > 0 and _s(T + short) != _s(T):
        return Fix("bigger_card", f"a card with at least {_s(T + short)} (this one has {_s(T)}) "
                                  f"would have had room for this allocation (later ones may need "
                                  f"more)")
    if T and short and short > 0:
        return Fix("bigger_card", f"a card with more than this one's {_s(T)}: this allocation was "
                                  f"{_s(short)} short (later ones may need more)")
    if T:
        return Fix("bigger_card", f"a card with more than this one's {_s(T)}")
    return Fix("bigger_card", "a card with more memory than this one")


def _mps_smaller(R):
    return Fix("reduce_peak_memory", f"hold less at the peak than now (this request: {_s(R)})",
               how="smaller batch or resolution; attention slicing / tiled decode; fp16")


def _mps(kind, decision, f, platform=None):
    R = f.get("requested") or 0
    ratio = Fix("mps_high_watermark",
                "the MPS allocator stops at a high watermark, a ratio (1.7 by default) of the "
                "memory macOS recommends for the GPU; a higher ratio, or 0.0 for no limit, lets "
                "it use more of the unified memory at the risk of heavy swapping or a system "
                "failure",
                how="export PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 (no limit) or a value up to 2.0")
    empty = Fix("mps_empty_cache",
                "torch.mps.empty_cache() returns the cached buffers to the system between "
                "phases (the allocator already freed them once before raising, so it helps the "
                "next steps and the rest of the system, not this allocation)",
                code="torch.mps.empty_cache()")
    smaller = _mps_smaller(R)
    if kind == "unexplained":
        return [Fix("free_system_memory", "on a Mac the GPU shares memory with every program: "
                    "Metal refused because the system had no room", how="close other programs; "
                    "a smaller batch; a Mac with more memory"), smaller, empty]
    said = (platform.settings_on if platform is not None else {}).get(
        "PYTORCH_MPS_HIGH_WATERMARK_RATIO")
    if said is not None and float(said) == 0.0 and f.get("limit") is not None:
        # MPSAllocator.mm prints "max allowed" only while a ratio above 0 is in force, and reads
        # the variable once, when the allocator is created
        ratio = Fix("mps_ratio_not_applied",
                    f"the text sets PYTORCH_MPS_HIGH_WATERMARK_RATIO={said}, yet the message "
                    f"still prints a max allowed of {_s(f['limit'])}: the setting did not take "
                    f"effect (the MPS allocator reads it once, when torch first uses the GPU, "
                    f"so setting it in os.environ after that changes nothing)",
                    how="export PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 in the shell before python "
                        "starts, or set os.environ at the very top of the script, before "
                        "import torch")
    return [smaller, ratio, empty]

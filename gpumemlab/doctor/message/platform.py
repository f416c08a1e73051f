"""Which platform printed an out-of-memory message, one class per platform: its facts (the clues
that give it away, the allocator variable it reads, whether it has expandable segments), its words
(what makes it refuse memory) and its fixes.

The same figures mean different things on different platforms, and the fixes differ: Windows
(WDDM) lets CUDA allocations spill into shared system memory and has no expandable segments;
WSL2 runs in a VM with its own memory limit; ROCm builds read ``PYTORCH_HIP_ALLOC_CONF`` and have
expandable segments only from PyTorch 2.11 built against ROCm 7.0 or newer; Intel XPU reads
neither CUDA variable and some Intel GPUs refuse one allocation over 4 GiB; APUs and unified-memory
machines (AMD Ryzen AI / Strix Halo, Jetson, Grace Hopper, Apple silicon) share system memory, so
"free" can exceed "total"; Apple MPS has its own allocator and settings; the cudaMallocAsync
backend reads none of the native allocator's settings.

A new platform is one subclass of :class:`PlatformKind` added to :data:`PLATFORMS` (as vLLM keeps
one class per platform): its clues, its variable, which allocator settings it honours
(:meth:`PlatformKind.supports`, which also ranks the fixes), its cause and its fixes live there
and nowhere else, with its own words: the torch module of its memory API (``module``), whether its
message's hint names a setting, a per-allocation limit (:meth:`PlatformKind.allocation_limit`) and
its own settings the text says are set (:meth:`PlatformKind.settings_said`, MPS's watermark
ratio). Each clue is a literal word or path shape searched once over a bounded
window of the text (linear time); :func:`detect` returns the platforms found with the words that
gave them away.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..diagnosis import Fix

__all__ = ["Platform", "PlatformKind", "PLATFORMS", "detect", "AROUND_BEFORE", "AROUND_AFTER"]

AROUND_BEFORE = 64_000     # characters of the paste before the message searched for clues
AROUND_AFTER = 16_000
NO_VARIABLE = ""           # a platform whose allocator reads no *_ALLOC_CONF variable (MPS)


class PlatformKind:
    """One platform. ``clue``: a pattern on the text; ``backend``/``allocator``: the message's
    backend word or allocator that implies it; ``ruled_out_by``: backends whose message rules it
    out; ``conf_variable``: the variable its allocator reads (None: no opinion, NO_VARIABLE: none);
    ``expandable``: "yes", "no" or "rocm" (only on recent ROCm builds); ``cause``: what makes it
    refuse memory the figures say is free (None: nothing to say); :meth:`fixes`: what to do then."""

    name = ""
    what = ""
    clue: re.Pattern | None = None
    backend: str | None = None
    allocator: str | None = None
    ruled_out_by: tuple = ()
    conf_variable: str | None = None
    expandable = "yes"
    cause: str | None = None
    module: str | None = None        # the torch module of its memory API (None: torch.cuda)
    hint_names_settings = True       # its message's hint line names an allocator setting

    def fixes(self, msg, requested: int) -> list:
        return []

    def allocation_limit(self, msg) -> tuple | None:
        """(bytes, inclusive) for a platform that refuses any single allocation that large
        (inclusive: at that size too), or None."""
        return None

    def supports(self, setting: str) -> str:
        """Whether this platform's allocator honours ``setting`` (a PYTORCH_*_ALLOC_CONF key):
        "yes", "no" or "maybe" (only some builds do). The fixes are ranked by it: what surely
        applies first, what may not after it, what cannot never."""
        if setting == "expandable_segments":
            return {"yes": "yes", "no": "no", "rocm": "maybe"}[self.expandable]
        return "yes"

    def caveat(self, setting: str) -> str | None:
        """What to know before trying ``setting`` here, when :meth:`supports` says "maybe"."""
        return None

    def outside_fixes(self, msg) -> list:
        """This platform's fixes for memory held outside PyTorch (who else holds the card)."""
        return []

    def figure_notes(self, msg, f: dict) -> list:
        """What this platform's figures mean beyond the common reading (``f``: the figures in
        bytes, as message/mode.py derives them)."""
        return []

    def settings_said(self, text: str) -> dict:
        """This platform's own settings the text says are set (name: value), beyond the
        allocator settings every platform reads (see :func:`detect`)."""
        return {}


class Windows(PlatformKind):
    name, what = "windows", "a Windows path or name"
    clue = re.compile(r"\b[A-Za-z]:\\{1,2}(?:Users|Program|Python|ComfyUI|AI|stable|"
                      r"[\w .-]{1,40}\\{1,2})|\\site-packages\\|\bWDDM\b|\.exe\b|\bWindows\b", re.I)
    ruled_out_by = ("MPS",)
    expandable = "no"
    cause = "Windows' driver model (WDDM) and its shared system memory"

    def fixes(self, msg, requested):
        return [Fix("windows_shared_memory",
                    "on Windows the driver (WDDM) manages GPU memory itself, reserves part of it "
                    "for the desktop and other apps, and may refuse or spill an allocation into "
                    "shared system memory",
                    how="close other GPU programs (browsers, games, other UIs); in the NVIDIA "
                        "Control Panel set 'CUDA - Sysmem Fallback Policy' to suit (prefer no "
                        "fallback to fail fast, or allow it to run slower); update the driver")]

    def outside_fixes(self, msg):
        return [Fix("windows_desktop_memory",
                    "on Windows the desktop (dwm.exe), browsers and other apps hold GPU memory "
                    "that the message does not list as processes",
                    how="Task Manager > Performance > GPU > 'Dedicated GPU memory' per process, "
                        "or nvidia-smi; close the GPU-accelerated apps before the run")]


class WSL(PlatformKind):
    name, what = "wsl", "WSL"
    clue = re.compile(r"\bWSL2?\b|microsoft-standard|/mnt/[c-z]/|/usr/lib/wsl/", re.I)
    ruled_out_by = ("MPS",)
    cause = "WSL2's VM memory limit"

    def fixes(self, msg, requested):
        return [Fix("wsl_memory_limit",
                    "WSL2 runs in a VM whose memory (half the host's by default) also bounds "
                    "pinned and shared GPU memory; the GPU driver is the Windows one",
                    how="raise memory= in %UserProfile%\\.wslconfig and restart WSL (wsl "
                        "--shutdown); update the Windows NVIDIA driver")]


class ROCm(PlatformKind):
    name, what, backend = "rocm", "ROCm/HIP", "HIP"
    clue = re.compile(r"\bHIP out of memory|PYTORCH_HIP_ALLOC_CONF|\bROCm\b|\bgfx\d{3,4}\b|"
                      r"\bhipMalloc|\bInstinct\b|\bMI[123]\d\dX?\b|\bRadeon\b|\+rocm", re.I)
    ruled_out_by = ("XPU", "MPS")
    conf_variable = "PYTORCH_HIP_ALLOC_CONF"
    expandable = "rocm"
    cause = "the ROCm runtime or driver"

    def caveat(self, setting):
        if setting == "expandable_segments":
            return ("on ROCm only PyTorch 2.11 or later built against ROCm 7.0 or newer has "
                    "them (older builds warn 'expandable_segments not supported on this "
                    "platform' and ignore the setting)")
        return None

    def fixes(self, msg, requested):
        return [Fix("rocm_driver",
                    "ROCm's free figure on data-centre and consumer cards is the driver's view; "
                    "allocation failures with room free come from the runtime",
                    how="check what else holds the card (rocm-smi --showpids); update ROCm and "
                        "the kernel driver (amdgpu); look up the ROCm release notes' known "
                        "issues for this card")]


class XPU(PlatformKind):
    name, what, backend = "xpu", "Intel XPU", "XPU"

    def supports(self, setting):
        # the XPU allocator reads PYTORCH_XPU_ALLOC_CONF only in recent releases
        return "no" if setting == "expandable_segments" else "maybe"

    def caveat(self, setting):
        return "XPU builds before the allocator settings were added ignore the variable"

    clue = re.compile(r"\bXPU out of memory|\bIntel\b.{0,20}\bArc\b|\bArc [AB]\d{3}\b|"
                      r"intel_extension_for_pytorch|\bipex\b|Level.Zero|\bxpu\b", re.I)
    ruled_out_by = ("CUDA", "HIP", "MPS")
    conf_variable = "PYTORCH_XPU_ALLOC_CONF"
    expandable = "no"
    cause = "the Intel GPU driver (some refuse one allocation of 4 GiB or more)"
    module = "torch.xpu"
    hint_names_settings = False      # "Please use `empty_cache` ...": no setting named
    # IPEX's allocator refuses asize > kStatefulLimit (4294967296, strictly over 4 GiB) on GPUs
    # without 2D block arrays; PyTorch's own XPU allocator (c10/xpu/XPUCachingAllocator.cpp) has
    # no check of its own: the SYCL runtime refuses above the device's max_mem_alloc_size, which
    # Level Zero sets at or just under 4 GiB on such GPUs (intel-extension-for-pytorch#846: a
    # 4.00 GiB tensor refused with nothing allocated), so there 4 GiB itself counts
    LIMIT = 4 << 30

    def allocation_limit(self, msg):
        if msg.per_allocation_limit is not None:
            return msg.per_allocation_limit.bytes, False
        return self.LIMIT, msg.allocator != "ipex"

    def figure_notes(self, msg, f):
        T, F, held = f.get("total"), f.get("free"), f.get("reserved")
        if None in (T, F, held) or msg.total is None or msg.free is None:
            return []
        if abs(T - held - F) <= msg.total.precision_bytes + msg.free.precision_bytes:
            # c10/xpu/XPUCachingAllocator.cpp: device_free = device_total - reserved unless the
            # device has sycl::aspect::ext_intel_free_memory
            return ["the free figure is the total minus what PyTorch reserved: it may be "
                    "PyTorch's own estimate (the XPU allocator computes it so when the device "
                    "cannot report free memory), which does not see other processes"]
        return []

    def fixes(self, msg, requested):
        if msg.per_allocation_limit is not None:
            return []       # the message's own limit is fitted by remedies
        limit, inclusive = self.allocation_limit(msg)
        if requested < limit or (requested == limit and not inclusive):
            return []
        return [per_allocation_fix(limit, inclusive)]


class MPS(PlatformKind):
    name, what, backend = "mps", "Apple MPS", "MPS"
    clue = re.compile(r"MPS backend|PYTORCH_MPS_|\bApple M\d\b|\bmps\b")
    ruled_out_by = ("CUDA", "HIP", "XPU")
    conf_variable = NO_VARIABLE
    expandable = "no"
    cause = "macOS's memory pressure"
    # os.environ["PYTORCH_MPS_HIGH_WATERMARK_RATIO"] = "0.0", export ...=0.0; the message's own
    # "Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable" does not count
    _RATIO = re.compile(r"(?<!Use )PYTORCH_MPS_HIGH_WATERMARK_RATIO['\"\]]{0,3}\s{0,3}=\s{0,3}"
                        r"['\"]?(\d+(?:\.\d+)?)")

    def settings_said(self, text):
        found = [m.group(1) for m in self._RATIO.finditer(text)]
        return {"PYTORCH_MPS_HIGH_WATERMARK_RATIO": found[-1]} if found else {}


class UnifiedMemory(PlatformKind):
    name, what = "unified_memory", "an APU or unified-memory machine"
    clue = re.compile(r"\b(?:Radeon \d{3}M|gfx115[01]|gfx1103|Strix Halo|Ryzen AI|Jetson|Orin|"
                      r"GH200|GB10|Grace Hopper|DGX Spark|unified memory|APU)\b", re.I)
    cause = "unified memory on an APU (the firmware carve-out or GTT size)"

    def fixes(self, msg, requested):
        return [Fix("unified_memory_carveout",
                    "on an APU or unified-memory machine the GPU shares system memory: what it "
                    "may allocate is set by the firmware's carve-out (UMA frame buffer) or the "
                    "kernel's GTT size, not by the free figure",
                    how="raise the UMA/VRAM carve-out in the firmware settings or the amdgpu GTT "
                        "size (amdgpu.gttsize / ttm pages limit); close memory-hungry programs")]


class CudaMallocAsync(PlatformKind):
    name, what, allocator = "cudaMallocAsync", "the cudaMallocAsync backend", "cudaMallocAsync"
    clue = re.compile(r"backend:cudaMallocAsync|Allocation on device \d* ?would exceed", re.I)
    expandable = "no"
    cause = "the driver's memory pool"

    def supports(self, setting):
        return "no"         # the driver's pool reads none of the native allocator's settings


PLATFORMS = [Windows(), WSL(), ROCm(), XPU(), MPS(), UnifiedMemory(), CudaMallocAsync()]


def per_allocation_fix(limit: int, inclusive: bool = False) -> Fix:
    """The fix for a GPU and driver that refuse one allocation over ``limit`` bytes (of
    ``limit`` or more when ``inclusive``)."""
    from gpumemlab.units import format_size

    size = f"of {format_size(limit)} or more" if inclusive else f"over {format_size(limit)}"
    return Fix("per_allocation_limit",
               f"this GPU and driver refuse a single allocation {size} (some Intel GPUs and "
               f"older drivers), however much memory is free",
               how="keep every tensor under that size: a smaller batch, chunked operations "
                   "(attention slicing, tiled VAE decode); update the GPU driver and compute "
                   "runtime")


# what the user says is set: the same words in PyTorch's own hint ("try setting ...") do not count
_SETTING_SAID = re.compile(r"expandable_segments\s*:\s*True|max_split_size_mb\s*:\s*\d+|"
                           r"garbage_collection_threshold\s*:\s*[\d.]+", re.I)
_HINT_BEFORE = re.compile(r"try\s*setting\s*(?:PYTORCH_\w{0,8}ALLOC_CONF\s*=\s*)?$", re.I)


@dataclass
class Platform:
    """The platform clues of a message.

    ``names`` the platforms found (each a :class:`PlatformKind` ``name``, in :data:`PLATFORMS`
    order), ``evidence`` the words that gave each away, ``kinds`` the classes themselves;
    ``settings_on`` the allocator settings the text says are set (outside PyTorch's own hint
    line); ``conf_variable`` the environment variable this platform's allocator reads (None for
    MPS).
    """

    names: list = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    settings_on: dict = field(default_factory=dict)
    conf_variable: str | None = "PYTORCH_CUDA_ALLOC_CONF"
    kinds: list = field(default_factory=list, repr=False)

    def has(self, name: str) -> bool:
        return name in self.names

    @property
    def expandable_segments(self) -> str:
        """"yes", "no" (the platform has none) or "maybe" (only some builds have them)."""
        return self.supports("expandable_segments")

    @property
    def without_expandable(self) -> str | None:
        """The first platform found that has no expandable segments, or None."""
        return next((k.name for k in self.kinds if k.supports("expandable_segments") == "no"),
                    None)

    def figure_notes(self, msg, f) -> list:
        """Every found platform's own lines on what its figures mean."""
        return [line for k in self.kinds for line in k.figure_notes(msg, f)]

    def outside_fixes(self, msg) -> list:
        """Every found platform's fixes for memory held outside PyTorch."""
        return [f for k in self.kinds for f in k.outside_fixes(msg)]

    def caveats(self, setting: str) -> list:
        """Each found platform's caveat for ``setting`` (see :meth:`PlatformKind.caveat`)."""
        return [c for k in self.kinds if k.supports(setting) == "maybe"
                for c in [k.caveat(setting)] if c]

    def supports(self, setting: str) -> str:
        """The least support any found platform gives ``setting``: "no" over "maybe" over
        "yes" (a plain CUDA build, no platform found, supports every setting)."""
        found = {k.supports(setting) for k in self.kinds}
        return "no" if "no" in found else "maybe" if "maybe" in found else "yes"

    def rank(self, fixes: list) -> list:
        """``fixes`` with each allocator setting this platform may not honour moved after the
        fixes that surely apply (a stable order otherwise); the closing "would not help" note
        stays last."""
        def maybe(f):
            key = (f.alloc_conf or "").split(":")[0]
            return bool(key) and self.supports(key) == "maybe"
        last = [f for f in fixes if f.name == "not_empty_cache"]
        body = [f for f in fixes if f.name != "not_empty_cache"]
        return [f for f in body if not maybe(f)] + [f for f in body if maybe(f)] + last

    @property
    def module(self) -> str:
        """The torch module of this platform's memory API (torch.cuda, torch.xpu)."""
        return next((k.module for k in self.kinds if k.module), "torch.cuda")

    @property
    def hint_names_settings(self) -> bool:
        return all(k.hint_names_settings for k in self.kinds)

    def allocation_limit(self, msg) -> tuple | None:
        """The first found platform's per-allocation limit (see
        :meth:`PlatformKind.allocation_limit`), or None."""
        return next((lim for k in self.kinds for lim in [k.allocation_limit(msg)] if lim), None)

    def fixes(self, msg, requested: int) -> list:
        """Every found platform's fixes for memory the figures say was free, in order."""
        return [f for k in self.kinds for f in k.fixes(msg, requested)]

    @property
    def causes(self) -> list:
        return [k.cause for k in self.kinds if k.cause]


def detect(msg, platforms=None) -> Platform:
    """The platform clues in ``msg`` (an :class:`~gpumemlab.doctor.message.OOMMessage`): its
    backend and allocator first, then the words around it."""
    platforms = PLATFORMS if platforms is None else platforms
    p = Platform()
    found = {}
    for k in platforms:
        if k.backend is not None and msg.backend == k.backend:
            found[k.name] = (k, f"the message says {k.backend}"
                                + (" (a ROCm build)" if k.backend == "HIP" else "")
                             if k.backend != "MPS" else "an MPS allocator message")
        elif k.allocator is not None and msg.allocator == k.allocator:
            found[k.name] = (k, f"{k.what}'s message")
    # the message and its surroundings: a bounded window keeps this constant-time per paste
    text = msg.context[max(0, msg.offset - AROUND_BEFORE):msg.offset + AROUND_AFTER]
    for k in platforms:
        if k.name in found or k.clue is None or msg.backend in k.ruled_out_by:
            continue        # the message itself names another backend
        m = k.clue.search(text)
        if m:
            found[k.name] = (k, f"{k.what}: {m.group(0).strip()[:60]!r}")
    for k in platforms:       # registry order, whatever order they were found in
        if k.name in found:
            p.kinds.append(k)
            p.names.append(k.name)
            p.evidence[k.name] = found[k.name][1]
    chosen = next((k.conf_variable for k in p.kinds if k.conf_variable is not None), None)
    if chosen is not None:
        p.conf_variable = chosen or None
    elif msg.hint_variable == "PYTORCH_ALLOC_CONF":
        p.conf_variable = "PYTORCH_ALLOC_CONF"
    for k in p.kinds:
        p.settings_on.update(k.settings_said(text))
    for m in _SETTING_SAID.finditer(text):
        if _HINT_BEFORE.search(text[max(0, m.start() - 60):m.start()]):
            continue
        key = m.group(0).split(":")[0].strip().lower()
        p.settings_on.setdefault(key, "".join(m.group(0).split()))
    return p

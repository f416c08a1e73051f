"""Which platform printed an out-of-memory message, from the message and the text around it.

The same figures mean different things on different platforms, and the fixes differ: Windows
(WDDM) lets CUDA allocations spill into shared system memory and has no expandable segments;
WSL2 runs in a VM with its own memory limit; ROCm builds read ``PYTORCH_HIP_ALLOC_CONF`` and have
expandable segments only from PyTorch 2.11 built against ROCm 7.0 or newer; Intel XPU reads
neither CUDA variable and some Intel GPUs refuse one allocation over 4 GiB; APUs and unified-memory
machines (AMD Ryzen AI / Strix Halo, Jetson, Grace Hopper, Apple silicon) share system memory, so
"free" can exceed "total"; Apple MPS has its own allocator and settings. Each clue is a literal
word or path shape searched once over the text (linear time); :func:`detect` returns the clues it
found with the words that gave them away.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Platform", "detect", "AROUND_BEFORE", "AROUND_AFTER"]

AROUND_BEFORE = 64_000     # characters of the paste before the message searched for clues
AROUND_AFTER = 16_000

_CLUES = (  # (platform, pattern, what it shows)
    ("windows", re.compile(r"\b[A-Za-z]:\\{1,2}(?:Users|Program|Python|ComfyUI|AI|stable|"
                           r"[\w .-]{1,40}\\{1,2})|\\site-packages\\|\bWDDM\b|\.exe\b|"
                           r"\bWindows\b", re.I), "a Windows path or name"),
    ("wsl", re.compile(r"\bWSL2?\b|microsoft-standard|/mnt/[c-z]/|/usr/lib/wsl/", re.I),
     "WSL"),
    ("rocm", re.compile(r"\bHIP out of memory|PYTORCH_HIP_ALLOC_CONF|\bROCm\b|\bgfx\d{3,4}\b|"
                        r"\bhipMalloc|\bInstinct\b|\bMI[123]\d\dX?\b|\bRadeon\b|\+rocm",
                        re.I), "ROCm/HIP"),
    ("xpu", re.compile(r"\bXPU out of memory|\bIntel\b.{0,20}\bArc\b|\bArc [AB]\d{3}\b|"
                       r"intel_extension_for_pytorch|\bipex\b|Level.Zero|\bxpu\b", re.I),
     "Intel XPU"),
    ("mps", re.compile(r"MPS backend|PYTORCH_MPS_|\bApple M\d\b|\bmps\b"), "Apple MPS"),
    ("unified_memory", re.compile(r"\b(?:Radeon \d{3}M|gfx115[01]|gfx1103|Strix Halo|Ryzen AI|"
                                  r"Jetson|Orin|GH200|GB10|Grace Hopper|DGX Spark|"
                                  r"unified memory|APU)\b", re.I),
     "an APU or unified-memory machine"),
    ("cudaMallocAsync", re.compile(r"backend:cudaMallocAsync|Allocation on device \d* ?would "
                                   r"exceed", re.I), "the cudaMallocAsync backend"),
)
# what the user says is set: the same words in PyTorch's own hint ("try setting ...") do not count
_SETTING_SAID = re.compile(r"expandable_segments\s*:\s*True|max_split_size_mb\s*:\s*\d+|"
                           r"garbage_collection_threshold\s*:\s*[\d.]+", re.I)
_HINT_BEFORE = re.compile(r"try\s*setting\s*(?:PYTORCH_\w{0,8}ALLOC_CONF\s*=\s*)?$", re.I)


@dataclass
class Platform:
    """The platform clues of a message.

    ``names`` the platforms found ("windows", "wsl", "rocm", "xpu", "mps", "unified_memory",
    "cudaMallocAsync"), ``evidence`` the words that gave each away; ``settings_on`` the
    allocator settings the text says are set (outside PyTorch's own hint line);
    ``conf_variable`` the environment variable this platform's allocator reads (None for MPS).
    """

    names: list = field(default_factory=list)
    evidence: dict = field(default_factory=dict)
    settings_on: dict = field(default_factory=dict)
    conf_variable: str | None = "PYTORCH_CUDA_ALLOC_CONF"

    def has(self, name: str) -> bool:
        return name in self.names

    @property
    def expandable_segments(self) -> str:
        """"yes", "no" (the platform has none) or "rocm" (only on recent ROCm builds)."""
        if self.has("windows") or self.has("mps") or self.has("xpu") \
                or self.has("cudaMallocAsync"):
            return "no"
        return "rocm" if self.has("rocm") else "yes"


def detect(msg) -> Platform:
    """The platform clues in ``msg`` (an :class:`~gpumemlab.doctor.message.OOMMessage`): its
    backend and allocator first, then the words around it."""
    p = Platform()

    def add(name, why):
        if name not in p.names:
            p.names.append(name)
            p.evidence[name] = why

    if msg.backend == "HIP":
        add("rocm", "the message says HIP (a ROCm build)")
    elif msg.backend == "XPU":
        add("xpu", "the message says XPU")
    elif msg.backend == "MPS":
        add("mps", "an MPS allocator message")
    if msg.allocator == "cudaMallocAsync":
        add("cudaMallocAsync", "the cudaMallocAsync backend's message")
    # the message and its surroundings: a bounded window keeps this constant-time per paste
    text = msg.context[max(0, msg.offset - AROUND_BEFORE):msg.offset + AROUND_AFTER]
    excluded = {"CUDA": ("xpu", "mps"), "HIP": ("xpu", "mps"), "XPU": ("rocm", "mps"),
                "MPS": ("rocm", "xpu", "windows", "wsl")}.get(msg.backend, ())
    for name, pattern, what in _CLUES:
        if name in excluded:
            continue        # the message itself names another backend
        m = pattern.search(text)
        if m and name not in p.names:
            add(name, f"{what}: {m.group(0).strip()[:60]!r}")
    if p.has("rocm"):
        p.conf_variable = "PYTORCH_HIP_ALLOC_CONF"
    elif p.has("xpu"):
        p.conf_variable = "PYTORCH_XPU_ALLOC_CONF"
    elif p.has("mps"):
        p.conf_variable = None
    elif msg.hint_variable == "PYTORCH_ALLOC_CONF":
        p.conf_variable = "PYTORCH_ALLOC_CONF"
    for m in _SETTING_SAID.finditer(text):
        if _HINT_BEFORE.search(text[max(0, m.start() - 60):m.start()]):
            continue
        key = m.group(0).split(":")[0].strip().lower()
        p.settings_on.setdefault(key, "".join(m.group(0).split()))
    return p

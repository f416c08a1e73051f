"""``PYTORCH_CUDA_ALLOC_CONF`` / ``PYTORCH_ALLOC_CONF``: the allocator's settings and their parser.

Follows the newest c10/core/AllocatorConfig.{h,cpp} (``AcceleratorAllocatorConfig::parseArgs``
and ``ConfigTokenizer``) and c10/cuda/CUDAAllocatorConfig.cpp (see docs/research/
NEWEST_PYTORCH_FACTS.md): the string is lexed on ``, : [ ]``, all whitespace is dropped, the
separator after a key is skipped without being checked (so ``expandable_segments,True`` is
accepted, as in PyTorch), numbers take their numeric prefix (``stoull``), booleans are exactly
``True`` or ``False``, and an unknown key is an error. Every parse first resets
max_split_size, roundup_power2_divisions and garbage_collection_threshold to their defaults and
max_non_split_rounding to the large segment size; other settings keep their previous values.

Errors raise :class:`AllocatorConfigError`, which is both a ``ValueError`` (PyTorch's
TORCH_CHECK_VALUE) and a ``RuntimeError`` (its internal asserts and ``stoull`` failures), with
PyTorch's message. Unlike PyTorch, a failed parse changes nothing at all (PyTorch keeps the keys
applied before the bad one): bad input loses nothing.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

from . import config_parsers as P
from .config_parsers import AllocatorConfigError
from .constants import (K_LARGE_BUFFER, K_MB, K_MIN_LARGE_ALLOC, K_ROUNDUP_POWER2_INTERVALS,
                        SIZE_MAX)
from .rounding import roundup_power2_bucket

# The first of these that is set wins, as in c10 (the legacy CUDA name first).
ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF")

__all__ = ["AllocatorConfig", "AllocatorConfigError", "SETTINGS", "Setting", "parse_alloc_conf",
           "recorded_conf", "alloc_conf_from_environ", "lex_args", "ENV_VARS"]


def lex_args(env: str) -> list[str]:
    """Split a settings string into tokens like ``ConfigTokenizer``: separators are tokens,
    whitespace is dropped."""
    tokens: list[str] = []
    buf: list[str] = []
    for ch in env:
        if ch in ",:[]":
            if buf:
                tokens.append("".join(buf))
                buf = []
            tokens.append(ch)
        elif not ch.isspace():
            buf.append(ch)
    if buf:
        tokens.append("".join(buf))
    return tokens


class AllocatorConfig:
    """The settings the caching allocator reads (c10 ``AcceleratorAllocatorConfig`` and
    ``CUDAAllocatorConfig``)."""

    def __init__(self):
        self.max_split_size = SIZE_MAX
        self.large_segment_size = K_LARGE_BUFFER
        self.max_non_split_rounding_size = K_LARGE_BUFFER
        self.garbage_collection_threshold = 0.0
        self.roundup_power2_divisions_ = [0] * K_ROUNDUP_POWER2_INTERVALS
        self.expandable_segments = False
        self.release_lock_on_cudamalloc = False
        self.pinned_use_cuda_host_register = False
        self.pinned_num_register_threads = 1
        self.pinned_use_background_threads = False
        self.pinned_reserve_segment_size_mb = 0
        self.pinned_free_catch_all = False
        # AcceleratorAllocatorConfig's host keys (torch 2.13): above these, no power-of-2
        # rounding / no caching of pinned blocks. Bytes; SIZE_MAX (the default) means no limit.
        self.pinned_max_round_threshold = SIZE_MAX
        self.pinned_max_cached_size = SIZE_MAX
        self.graph_capture_record_stream_reuse = False
        self.throw_on_cudamalloc_oom = False
        self.per_process_memory_fraction = 1.0
        self.backend = "native"
        self.last_allocator_settings = ""
        self.any_roundup = False  # any bucket with divisions > 1 (else round_size is plain 512s)

    @classmethod
    def parse(cls, env: str | None = "") -> "AllocatorConfig":
        """A fresh config with ``env`` applied."""
        config = cls()
        if env:
            config.apply(env)
        return config

    def copy(self) -> "AllocatorConfig":
        return copy.deepcopy(self)

    def roundup_power2_divisions(self, size: int) -> int:
        """Divisions for ``size``'s interval (``rounding.roundup_power2_bucket``)."""
        return self.roundup_power2_divisions_[roundup_power2_bucket(size)]

    def apply(self, env: str) -> None:
        """Parse ``env`` onto this config (``parseArgs``). All or nothing."""
        if not isinstance(env, str):
            raise TypeError(f"allocator settings must be a string like 'expandable_segments:True', "
                            f"not {type(env).__name__}")
        trial = self.copy()
        trial._parse_args(env)
        self.__dict__.update(trial.__dict__)

    def _parse_args(self, env: str) -> None:
        self.max_split_size = SIZE_MAX
        self.roundup_power2_divisions_ = [0] * K_ROUNDUP_POWER2_INTERVALS
        self.garbage_collection_threshold = 0.0
        self.last_allocator_settings = env
        tokens = P.Tokens(lex_args(env))
        # Pass 1: the large segment size, which bounds the other sizes.
        i = 0
        while i < len(tokens):
            if tokens[i] == "large_segment_size_mb":
                value = tokens.to_size_t(i + 2)
                if value <= K_MIN_LARGE_ALLOC // K_MB:
                    raise AllocatorConfigError(
                        "CachingAllocator option large_segment_size_mb must be > 10 MB")
                self.large_segment_size = value * K_MB
            i += 1
        self.max_non_split_rounding_size = self.large_segment_size
        # Pass 2: everything else.
        i = 0
        while i < len(tokens):
            key = tokens[i]
            handler = _HANDLERS.get(key)
            if handler is None:
                raise AllocatorConfigError(f"Unrecognized key '{key}' in Accelerator allocator config.")
            # The separator after the key is skipped unchecked, as in c10.
            i = handler(self, tokens, i + 2, key)
            if i + 1 < len(tokens):
                i += 1  # the ',' (also unchecked in c10)
            i += 1
        self.any_roundup = any(d > 1 for d in self.roundup_power2_divisions_)

    def settings_dict(self) -> dict:
        """The ``allocator_settings`` entry of ``torch.cuda.memory._snapshot()``: the recorded
        string, then each ``SETTINGS`` row's snapshot field (THCPModule_memorySnapshot's order)."""
        out = {"PYTORCH_CUDA_ALLOC_CONF": self.last_allocator_settings}
        for row in _RECORDED:
            out[row.field] = row.to_field(getattr(self, row.attr))
        return out


@dataclass(frozen=True)
class Setting:
    """One ``PYTORCH_CUDA_ALLOC_CONF`` key: its parser, the ``AllocatorConfig`` attribute it
    sets, the ``allocator_settings`` field a snapshot records it in (None: only the settings
    string shows it), why it matters in one line, and where it applies."""

    key: str
    parse: Callable            # (config, tokens, i, key) -> index of its last token
    attr: str | None = None
    field: str | None = None
    why: str = ""
    platforms: str = "CUDA and ROCm"
    to_field: Callable = None  # attribute value -> the snapshot field's value
    from_field: Callable = None   # snapshot field value -> attribute value (ValueError if bad)
    to_conf: Callable = None   # attribute value -> "key:value" (None: the default, no text)


def _bool_conf(key):
    return lambda v: f"{key}:{'True' if v else 'False'}"


def _divisions_of(value) -> list:
    # c10 records them keyed by each bucket's start in MB ("1", "2", ... "32768"); an int or a
    # list (older or hand-made files) is read too
    if isinstance(value, dict):
        out = [int(value.get(str(1 << i), 0)) for i in range(K_ROUNDUP_POWER2_INTERVALS)]
    elif isinstance(value, int) and not isinstance(value, bool):
        out = [value] * K_ROUNDUP_POWER2_INTERVALS
    elif isinstance(value, (list, tuple)):
        out = [int(d) for d in value][:K_ROUNDUP_POWER2_INTERVALS]
        out += [0] * (K_ROUNDUP_POWER2_INTERVALS - len(out))
    else:
        raise ValueError("roundup_power2_divisions is not a dict, list or int")
    if any(d < 0 or (d and not P.is_power_of_2(d)) for d in out):
        raise ValueError("roundup_power2_divisions holds a value that is not a power of 2")
    return out


def _divisions_conf(divisions) -> str | None:
    if not any(divisions):
        return None
    return "roundup_power2_divisions:[" + ",".join(
        f"{1 << i}:{d}" for i, d in enumerate(divisions)) + "]"


def _split_of(value) -> int:
    value = int(value)
    return SIZE_MAX if value < 0 else value


_GC = "needs a memory fraction below 1 (c10 applies it only then)"
_ROCM = "ROCm spelling of the CUDA key"
_PINNED = "pinned host memory only (no effect on the device allocator)"

# The one table of settings: the parser (``_parse_args``), the snapshot (``settings_dict``),
# what a recording ran under (``recorded_conf``: replay, the views' ``size_rules`` and the
# doctor) all read it. A new setting is one row here plus the code that obeys it.
SETTINGS = (
    Setting("large_segment_size_mb", P.skip_large_segment_size, "large_segment_size",
            why="the size of a large segment, and of an expandable segment's pages"),
    Setting("max_split_size_mb", P.parse_mb_at_least_large_segment("max_split_size"),
            "max_split_size", "max_split_size",
            why="free blocks larger than this are never split (less fragmentation, more misses)",
            to_field=lambda v: -1 if v == SIZE_MAX else v, from_field=_split_of,
            to_conf=lambda v: None if v == SIZE_MAX else f"max_split_size_mb:{v // K_MB}"),
    Setting("max_non_split_rounding_mb",
            P.parse_mb_at_least_large_segment("max_non_split_rounding_size"),
            "max_non_split_rounding_size",
            why="how much larger than a request an unsplittable cached block may be"),
    Setting("garbage_collection_threshold", P.parse_gc_threshold,
            "garbage_collection_threshold", "garbage_collection_threshold",
            why="frees cached blocks before the fraction cap is reached", platforms=_GC,
            to_field=float, from_field=float,
            to_conf=lambda v: f"garbage_collection_threshold:{v}" if v else None),
    Setting("roundup_power2_divisions", P.parse_roundup_power2_divisions,
            "roundup_power2_divisions_", "roundup_power2_divisions",
            why="requests round up to a fraction of a power of two (fewer distinct sizes)",
            to_field=lambda v: {str(1 << i): v[i] for i in range(K_ROUNDUP_POWER2_INTERVALS)},
            from_field=_divisions_of, to_conf=_divisions_conf),
    Setting("expandable_segments", P.parse_bool("expandable_segments"), "expandable_segments",
            "expandable_segments",
            why="segments grow by mapping pages instead of new cudaMallocs (no fragmentation "
                "across segments)",
            platforms="CUDA; ROCm from PyTorch 2.11 with ROCm 7.0; not on Windows",
            to_field=bool, from_field=bool, to_conf=_bool_conf("expandable_segments")),
    Setting("pinned_use_background_threads", P.parse_bool("pinned_use_background_threads"),
            "pinned_use_background_threads", platforms=_PINNED),
    Setting("release_lock_on_cudamalloc", P.parse_bool("release_lock_on_cudamalloc"),
            "release_lock_on_cudamalloc", "release_lock_on_cudamalloc",
            why="other threads may allocate while one waits in cudaMalloc",
            to_field=bool, from_field=bool, to_conf=_bool_conf("release_lock_on_cudamalloc")),
    Setting("release_lock_on_hipmalloc", P.parse_bool("release_lock_on_cudamalloc"),
            "release_lock_on_cudamalloc", platforms=_ROCM),
    Setting("pinned_use_cuda_host_register", P.parse_bool("pinned_use_cuda_host_register"),
            "pinned_use_cuda_host_register", "pinned_use_cuda_host_register",
            platforms=_PINNED, to_field=bool, from_field=bool,
            to_conf=_bool_conf("pinned_use_cuda_host_register")),
    Setting("pinned_use_hip_host_register", P.parse_bool("pinned_use_cuda_host_register"),
            "pinned_use_cuda_host_register", platforms=_ROCM),
    Setting("pinned_num_register_threads", P.parse_register_threads,
            "pinned_num_register_threads", "pinned_num_register_threads", platforms=_PINNED,
            to_field=int, from_field=int,
            to_conf=lambda v: None if v == 1 else f"pinned_num_register_threads:{v}"),
    Setting("pinned_reserve_segment_size_mb", P.parse_reserve_segment,
            "pinned_reserve_segment_size_mb", platforms=_PINNED),
    Setting("pinned_free_catch_all", P.parse_bool("pinned_free_catch_all"),
            "pinned_free_catch_all", platforms=_PINNED),
    Setting("pinned_max_round_threshold_mb", P.parse_pinned_mb("pinned_max_round_threshold"),
            "pinned_max_round_threshold", platforms=_PINNED,
            why="pinned requests above this are not rounded to a power of two"),
    Setting("pinned_max_cached_size_mb", P.parse_pinned_mb("pinned_max_cached_size"),
            "pinned_max_cached_size", platforms=_PINNED,
            why="pinned blocks above this are freed, not cached"),
    Setting("graph_capture_record_stream_reuse",
            P.parse_bool("graph_capture_record_stream_reuse"),
            "graph_capture_record_stream_reuse", "graph_capture_record_stream_reuse",
            why="blocks freed during a CUDA graph capture may be reused within it",
            to_field=bool, from_field=bool,
            to_conf=_bool_conf("graph_capture_record_stream_reuse")),
    Setting("throw_on_cudamalloc_oom", P.parse_bool("throw_on_cudamalloc_oom"),
            "throw_on_cudamalloc_oom", why="fail at the first cudaMalloc error, no cache freed"),
    Setting("per_process_memory_fraction", P.parse_fraction, "per_process_memory_fraction",
            why="caps the share of the card this process may reserve"),
    Setting("backend", P.parse_backend, "backend",
            why="native caching allocator or cudaMallocAsync (only native is modelled)"),
)
_HANDLERS = {row.key: row.parse for row in SETTINGS}
# the fields in the order THCPModule_memorySnapshot writes them (torch/csrc/cuda/Module.cpp)
_FIELD_ORDER = ("max_split_size", "garbage_collection_threshold", "expandable_segments",
                "pinned_num_register_threads", "release_lock_on_cudamalloc",
                "pinned_use_cuda_host_register", "graph_capture_record_stream_reuse",
                "roundup_power2_divisions")
_RECORDED = tuple(sorted((row for row in SETTINGS if row.field is not None),
                         key=lambda row: _FIELD_ORDER.index(row.field)))


def recorded_conf(settings) -> str:
    """The settings a recording ran under, as one ``PYTORCH_CUDA_ALLOC_CONF`` string: its
    recorded string (when this model parses it), then every recorded field that says otherwise
    (``torch.cuda.memory._set_allocator_settings`` keeps earlier keys, and a file may carry the
    fields without the string). The one reader of ``allocator_settings``: replay and the views'
    size rules both build their config from it. A malformed field of an untrusted file is
    left out."""
    if not isinstance(settings, dict):
        return ""
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    conf = conf if isinstance(conf, str) else ""
    try:
        base = AllocatorConfig.parse(conf)
    except (AllocatorConfigError, ValueError, RuntimeError):
        conf, base = "", AllocatorConfig()
    parts = [conf] if conf else []
    for row in _RECORDED:
        if row.field not in settings or row.to_conf is None:
            continue
        try:
            value = row.from_field(settings[row.field])
            text = row.to_conf(value)
            if value == getattr(base, row.attr):
                continue
            if text is None:          # the default, which a fresh parse restores
                text = row.to_conf(getattr(AllocatorConfig(), row.attr)) or ""
            if text:
                AllocatorConfig.parse(text)   # a value PyTorch would refuse is left out
                parts.append(text)
        except (AllocatorConfigError, ValueError, RuntimeError, TypeError, OverflowError):
            continue
    return ",".join(parts)


def parse_alloc_conf(env: str | None = "") -> AllocatorConfig:
    """Parse a ``PYTORCH_CUDA_ALLOC_CONF`` string into a fresh :class:`AllocatorConfig`."""
    return AllocatorConfig.parse(env)


def alloc_conf_from_environ(environ) -> str:
    """The settings string PyTorch reads from ``environ``: the first variable that is set."""
    for name in ENV_VARS:
        value = environ.get(name)
        if value is not None:
            return value
    return ""

"""Byte sizes: constants, parsing ("24GiB", "80GB", "512MiB") and c10's ``format_size``.

``format_size`` follows c10/util (CUDACachingAllocator.cpp's ``format_size``): two decimals,
"bytes" up to and including 1024, then KiB up to and including 1 MiB, MiB up to and including
1 GiB, GiB above.
"""
from __future__ import annotations

import re

from gpumemlab.allocator.sizes import format_size  # noqa: F401  (re-exported: c10's format)

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
TiB = 1024 * GiB

_UNITS = {
    "": 1, "b": 1, "byte": 1, "bytes": 1,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "k": KiB, "m": MiB, "g": GiB, "t": TiB,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(value, *, name: str = "size", round_down: bool = False) -> int:
    """Return ``value`` in bytes. Accepts an int, or a string such as "24GiB", "80GB", "512 MiB".

    Binary units (KiB, MiB, GiB, TiB, and the short K/M/G/T) are powers of 1024; decimal units
    (kB, MB, GB, TB) are powers of 1000, as on a GPU's spec sheet.

    ``round_down=True`` accepts a decimal that is not a whole number of bytes, such as the
    "79.33 GiB" PyTorch prints (two decimals), and rounds it down to whole bytes.

    Raises:
        TypeError: for a bool, float or other non-integer, non-string value.
        ValueError: for a negative size, an unknown unit, or a fractional byte count (unless
            ``round_down``).
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        if hasattr(value, "__index__") and not isinstance(value, bool):
            value = value.__index__()
        else:
            raise TypeError(f"{name} must be an int number of bytes or a string like '24GiB', "
                            f"not {type(value).__name__}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name} must not be negative, got {value}")
        return value
    match = _SIZE_RE.match(value)
    if not match:
        raise ValueError(f"cannot read {name} {value!r}: expected a number and a unit, "
                         f"like '24GiB', '80GB' or '512MiB'")
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(f"unknown unit {unit!r} in {name} {value!r}: "
                         f"use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB")
    if "." in number:
        from fractions import Fraction
        exact = Fraction(number) * factor
        if exact.denominator != 1 and not round_down:
            raise ValueError(f"{name} {value!r} is not a whole number of bytes")
        return int(exact)   # int() of a positive Fraction rounds down
    return int(number) * factor

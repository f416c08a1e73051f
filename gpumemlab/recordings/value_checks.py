"""Every value of an untrusted snapshot checked once, before anything reads it.

A snapshot holds dicts, lists, tuples, strings, numbers, booleans and None, a few levels deep
(``device_traces[0][12]["frames"][3]["line"]``), with integers that fit in 64 bits (addresses,
sizes, line numbers). A crafted file may instead nest values thousands of levels deep (code
that walks them recursively, from ``json.dumps`` to ``repr``, then dies with ``RecursionError``)
or hold an integer of thousands of digits (printing it raises ``ValueError``, and arithmetic on
it is slow; in JSON, over 4300 digits cannot even be converted: see ``json_int``).
``check_values`` walks the whole structure without recursion, in time linear in the file (every
element a walk visits costs the file at least one byte, so a walk longer than the file means
shared references were used to blow up the work), and raises ``SnapshotError`` naming the file
and the entry.
"""
from __future__ import annotations

from functools import partial
from itertools import chain, compress
from operator import is_

MAX_DEPTH = 64            # a real snapshot nests 6 levels; room for user metadata
INT_LIMIT = 1 << 64       # addresses and sizes are 64-bit; so is everything else in a snapshot

_CONTAINERS = (dict, list, tuple)
_IS_CONTAINER = frozenset(_CONTAINERS).__contains__
_IS_DICT = frozenset([dict]).__contains__
_IS_SEQ = frozenset([list, tuple]).__contains__
_CHUNK = 1 << 16
_ALL_STR = frozenset([str]).issuperset


class HugeInt(int):
    """What the JSON reader makes of an integer of ``digits`` digits, too long for a snapshot,
    without converting it (Python refuses over 4300 digits, and converting is quadratic):
    ``check_values`` then names the entry that holds it."""

    digits = 0


def json_int(text: str) -> int:
    """``json.loads(parse_int=...)``: an int, or a ``HugeInt`` for 30 digits and more (for a
    file that holds an integer too long for Python to convert)."""
    if len(text) < 30:
        return int(text)
    marker = HugeInt(INT_LIMIT)
    marker.digits = len(text.lstrip("-"))
    return marker


_IS_INT = frozenset([int, HugeInt]).__contains__


def check_values(root, source: str, budget: int, error) -> None:
    """Raise ``error("<source>: <where>: <problem>")`` for a value nested over ``MAX_DEPTH``
    levels, an integer outside +-2**64, or a walk of more than ``budget`` elements."""
    # Level by level, and each level's values gathered in C (chain, map, compress) a chunk of
    # containers at a time: no Python step per value or per container (a Python loop cost
    # three times as much).
    level, depth, visited = [root], 0, 0
    while level:
        depth += 1
        below = []
        for start in range(0, len(level), _CHUNK):
            chunk = level[start:start + _CHUNK]
            kinds = list(map(type, chunk))
            dicts = list(compress(chunk, map(_IS_DICT, kinds)))
            seqs = list(compress(chunk, map(_IS_SEQ, kinds)))
            visited += sum(map(len, seqs)) + 2 * sum(map(len, dicts))
            if visited > budget:
                raise error(f"{source}: the file reuses the same objects far more often than a "
                            f"real snapshot (a crafted pickle?); refused")
            values = list(chain.from_iterable(map(dict.values, dicts)))
            values.extend(chain.from_iterable(seqs))
            if not _ALL_STR(map(type, chain.from_iterable(dicts))):
                values.extend(chain.from_iterable(dicts))   # int or tuple keys: checked too
            _check_flat(root, source, error, values, below, budget)
        if below and depth >= MAX_DEPTH - 1:
            where = _locate(root, lambda x, d: d >= MAX_DEPTH - 1 and isinstance(x, _CONTAINERS),
                            budget)
            raise error(f"{source}: {where}: values nested more than {MAX_DEPTH} levels deep (a "
                        f"real snapshot nests a few)")
        level = below


def _check_flat(root, source, error, values, below, budget) -> None:
    """Check the integers among ``values`` and add the containers to ``below``."""
    types = list(map(type, values))
    if not types:
        return
    kinds = set(types)
    if int in kinds or HugeInt in kinds:
        is_int = _IS_INT if HugeInt in kinds else partial(is_, int)
        # one pass: the widest integer (bit_length ignores the sign; a HugeInt is 65 bits)
        if max(map(int.bit_length, compress(values, map(is_int, types)))) > 64:
            v = next(v for v in compress(values, map(is_int, types)) if v.bit_length() > 64)
            where = _locate(root, lambda x, d: x is v, budget)
            size = (f"{v.digits} digits" if type(v) is HugeInt else
                    f"about {int(v.bit_length() * 0.30103) + 1} digits")
            raise error(f"{source}: {where}: an integer of {size}, larger than any value a "
                        f"snapshot holds (64 bits)")
    if not kinds.isdisjoint(_CONTAINERS):
        below.extend(compress(values, map(_IS_CONTAINER, types)))


def _locate(root, found, budget) -> str:
    """Where the first value ``found(value, depth)`` accepts lies, as ``key[i]['name']`` (or
    "a value" after ``budget`` steps: shared references could make the search long)."""
    stack = [(root, 0, "")]
    while stack:
        obj, depth, path = stack.pop()
        budget -= len(obj)
        if budget < 0:
            break
        pairs = (obj.items() if isinstance(obj, dict) else enumerate(obj))
        for k, v in pairs:
            here = path + _step(k)
            if found(v, depth + 1) or (isinstance(k, int) and isinstance(obj, dict)
                                       and found(k, depth + 1)):
                return _short(here)
            if isinstance(v, _CONTAINERS) and depth + 1 < MAX_DEPTH:
                stack.append((v, depth + 1, here))
    return "a value"


def _short(path: str) -> str:
    """``device_traces[0][12]['frames']`` (a top-level key without brackets), long ones cut."""
    if path.startswith("['") and "']" in path:
        path = path[2:].replace("']", "", 1)
    return path if len(path) <= 120 else f"{path[:70]}...{path[-40:]}"


def _step(key) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return "[a key]" if not -INT_LIMIT < key < INT_LIMIT else f"[{key}]"
    if isinstance(key, str):
        return f"[{key[:40]!r}]" if len(key) <= 40 else f"[{key[:40]!r}...]"
    return f"[{type(key).__name__} key]"

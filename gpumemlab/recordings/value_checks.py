"""Every value of an untrusted snapshot checked once, before anything reads it.

A snapshot holds dicts, lists, tuples, strings, numbers, booleans and None, a few levels deep
(``device_traces[0][12]["frames"][3]["line"]``), with integers that fit in 64 bits (addresses,
sizes, line numbers). A crafted file may instead nest values thousands of levels deep (code
that walks them recursively, from ``json.dumps`` to ``repr``, then dies with ``RecursionError``)
or hold an integer of thousands of digits (printing it raises ``ValueError``, and arithmetic on
it is slow; in JSON, over 4300 digits cannot even be converted: see ``json_int``).

A real file shares objects. PyTorch's ``_snapshot`` (``THCPModule_memorySnapshot`` in
torch/csrc/cuda/Module.cpp) makes one dict per distinct frame and one list per distinct
traceback (``py_symbolize`` in torch/csrc/profiler/python/combined_traceback.cpp), handed to
every block and trace entry with that traceback, and ``_dump_snapshot`` pickles the result:
the pickle stores each object once and refers back to it (BINGET), so a walk that counts every
visit is 1.3-2.8x the file's size. ``check_values`` therefore counts each distinct container
once per depth: every element of a distinct container costs the file at least one byte (the
opcode that pushes it), so that work is bounded by the file's size times the depth, and the
check refuses beyond ``WORK_PER_BYTE`` elements a byte. What the shared objects unfold to (the
work of a reader that walks every visit, ``json.dumps`` or a frame count) is summed once per
distinct container too and refused beyond ``UNFOLDED_PER_BYTE`` a byte: a crafted pickle of
references to references costs the check little and is refused in one line.
``check_values`` raises ``SnapshotError`` naming the file and the entry.
"""
from __future__ import annotations

from functools import partial
from itertools import chain, compress, repeat
from operator import is_

MAX_DEPTH = 64            # a real snapshot nests 6 levels; room for user metadata
INT_LIMIT = 1 << 64       # addresses and sizes are 64-bit; so is everything else in a snapshot
# Elements walked per byte of file: a distinct container is walked once at each depth it is
# reached at (a frame dict of PyTorch's sits under blocks and under trace entries: two depths);
# real files need 0.2-0.7 a byte.
WORK_PER_BYTE = 4
# Elements the file unfolds to when every reference is followed, per byte: real files 1.3-2.8
# (shared frames), deep shared stacks perhaps 10; a crafted file of references to references
# unfolds exponentially.
UNFOLDED_PER_BYTE = 64

_REFUSED = ("the file reuses the same objects far more often than a real snapshot "
            "(a crafted pickle?); refused")

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


def check_values(root, source: str, size: int, error) -> None:
    """Raise ``error("<source>: <where>: <problem>")`` for a value nested over ``MAX_DEPTH``
    levels, an integer outside +-2**64, or a file of ``size`` bytes whose distinct containers
    (or what their shared references unfold to) are far more than its bytes could hold."""
    # Level by level, each level's distinct containers (by identity: the file's objects are
    # alive, so ids are unique) gathered in C (dict over ids, chain, map, compress) a chunk at a
    # time: no Python step per value. A container reached at several depths is walked at each,
    # so the depth found is the longest path, which is what a recursive reader meets (and a
    # cycle never ends: it is refused as too deep).
    budget = WORK_PER_BYTE * size + 1000
    level, depth, walked, levels = [root], 0, 0, []
    while level:
        depth += 1
        levels.append(level)
        below = []
        for start in range(0, len(level), _CHUNK):
            chunk = level[start:start + _CHUNK]
            kinds = list(map(type, chunk))
            dicts = list(compress(chunk, map(_IS_DICT, kinds)))
            seqs = list(compress(chunk, map(_IS_SEQ, kinds)))
            walked += sum(map(len, seqs)) + 2 * sum(map(len, dicts))
            if walked > budget:
                raise error(f"{source}: {_REFUSED}")
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
        level = list(dict(zip(map(id, below), below)).values())
    if _unfolded(levels) > UNFOLDED_PER_BYTE * size + 1000:
        raise error(f"{source}: {_REFUSED}")


def _unfolded(levels) -> int:
    """How many elements the containers unfold to when every shared reference is followed
    (what a reader that walks each visit meets), summed once per distinct container, deepest
    level first: one Python step per distinct container, none per value."""
    if not isinstance(levels[0][0], _CONTAINERS):
        return 0     # a bare number or string: not a snapshot, which the reader says next
    sizes: dict = {}
    get = sizes.get
    for level in reversed(levels):
        for obj in level:
            key = id(obj)
            if key in sizes:
                continue   # also reached deeper, where its children were already summed
            if type(obj) is dict:
                sizes[key] = 2 * len(obj) + sum(map(get, map(id, obj.values()), repeat(0)))
            else:
                sizes[key] = len(obj) + sum(map(get, map(id, obj), repeat(0)))
    return sizes[id(levels[0][0])]


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

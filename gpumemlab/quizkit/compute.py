"""A tiny allocation language for questions, run on the simulated GPU to compute answers.

``ops`` is a list of lines: ``a = 3MiB`` allocates (sizes as ``parse_size`` reads them; a bare
number is bytes; ``@1`` at the end picks stream 1), ``del a`` frees, ``empty_cache`` returns
wholly free segments. Private pools: ``pool P`` makes a ``MemPool`` (``pool P use_on_oom``,
``pool P no_split``), ``in P: a = 3MiB`` allocates inside ``use_mem_pool(P)``, and ``del P``
drops the pool (its destructor releases it, as torch's does). A request that does not fit is recorded as an out-of-memory error and the
name stays unbound, as in a notebook. ``measure`` names what the question asks about; see
``MEASURES``. So a bank never types an allocator number: the simulator produces it.
"""
from __future__ import annotations

import ast
import operator
import re

from .. import OutOfMemoryError, SimulatedGPU
from ..units import parse_size

_ALLOC = re.compile(r"^([A-Za-z_]\w*)\s*=\s*([0-9.]+\s*[A-Za-z]*)\s*(?:@\s*(\d+))?$")
_DEL = re.compile(r"^del\s+([A-Za-z_]\w*)$")
_POOL = re.compile(r"^pool\s+([A-Za-z_]\w*)((?:\s+(?:use_on_oom|no_split))*)$")
_IN_POOL = re.compile(r"^in\s+([A-Za-z_]\w*)\s*:\s*(.+)$")
MEASURES = ("memory_reserved", "memory_allocated", "max_memory_reserved", "max_memory_allocated",
            "segments", "largest_free", "cached_free", "oom", "num_ooms")
_MEASURE_ARG = re.compile(r"^(size_of|same_address|stat):(.+)$")


class Outcome:
    """What running some ops left behind: the GPU, named allocations, OOM count and the pools
    (kept alive with the outcome, as a notebook keeps its pools)."""

    def __init__(self, gpu, names, ooms, pools=None):
        self.gpu, self.names, self.ooms = gpu, names, ooms
        self.pools = pools or {}


def validate_compute(spec) -> None:
    """Raise ValueError naming the problem if ``spec`` is not a usable compute mapping."""
    if not isinstance(spec, dict):
        raise ValueError("must be a mapping with 'ops' and 'measure', or with 'expr'")
    if "expr" in spec:
        if set(spec) != {"expr"}:
            raise ValueError("an 'expr' compute takes no other keys")
        evaluate_expr(spec["expr"])
        return
    unknown = set(spec) - {"ops", "measure", "total_memory", "alloc_conf"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    ops = spec.get("ops")
    if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
        raise ValueError("'ops' must be a list of strings")
    for op in ops:
        parse_op(op)
    validate_measure(spec.get("measure"))


def validate_measure(measure) -> None:
    if not isinstance(measure, str):
        raise ValueError(f"'measure' must be one of {', '.join(MEASURES)} or size_of:NAME, "
                         f"same_address:A,B, stat:KEY")
    if measure not in MEASURES and not _MEASURE_ARG.match(measure):
        raise ValueError(f"unknown measure {measure!r}")


def parse_op(op: str):
    """-> ('alloc', name, nbytes, stream[, pool]) | ('del', name) | ('empty_cache',) |
    ('pool', name, use_on_oom, no_split)."""

    text = op.strip()
    if text in ("empty_cache", "empty_cache()"):
        return ("empty_cache",)
    m = _POOL.match(text)
    if m:
        flags = m.group(2).split()
        return ("pool", m.group(1), "use_on_oom" in flags, "no_split" in flags)
    m = _IN_POOL.match(text)
    if m:
        inner = parse_op(m.group(2))
        if inner[0] != "alloc" or len(inner) != 4:
            raise ValueError(f"cannot read op {op!r}: 'in P:' takes an allocation, "
                             f"like 'in P: a = 3MiB'")
        return inner + (m.group(1),)
    m = _DEL.match(text)
    if m:
        return ("del", m.group(1))
    m = _ALLOC.match(text)
    if m:
        return ("alloc", m.group(1), parse_size(m.group(2).replace(" ", ""), name="op size"),
                int(m.group(3) or 0))
    raise ValueError(f"cannot read op {op!r}: write 'a = 3MiB', 'a = 3MiB @1', 'del a', "
                     f"'empty_cache', 'pool P [use_on_oom] [no_split]' or 'in P: a = 3MiB'")


def run_ops(ops, total_memory="24GiB", alloc_conf="") -> Outcome:
    """Run ``ops`` on a fresh SimulatedGPU."""
    # through the flat API, so the quiz follows wherever the device module lives

    gpu = SimulatedGPU(total_memory=total_memory, alloc_conf=alloc_conf)
    names, pools, ooms = {}, {}, 0
    for op in ops:
        parsed = parse_op(op)
        if parsed[0] == "alloc":
            name, nbytes, stream = parsed[1:4]
            old = names.pop(name, None)
            if old is not None:
                old.free()   # rebinding a name drops the old tensor, as in Python
            try:
                if len(parsed) == 5:
                    if parsed[4] not in pools:
                        raise ValueError(f"op {op!r}: no pool {parsed[4]!r} (make it with "
                                         f"'pool {parsed[4]}')")
                    with gpu.use_mem_pool(pools[parsed[4]]):
                        names[name] = gpu.empty(nbytes, stream=stream)
                else:
                    names[name] = gpu.empty(nbytes, stream=stream)
            except OutOfMemoryError:
                ooms += 1
        elif parsed[0] == "pool":
            pools[parsed[1]] = gpu.MemPool(use_on_oom=parsed[2], no_split=parsed[3])
        elif parsed[0] == "del":
            if parsed[1] in pools:
                del pools[parsed[1]]   # the MemPool's destructor releases and empties it
                continue
            alloc = names.pop(parsed[1], None)
            if alloc is None:
                raise ValueError(f"op {op!r}: {parsed[1]!r} is not allocated")
            alloc.free()
        else:
            gpu.empty_cache()
    return Outcome(gpu, names, ooms, pools)


def inactive_blocks(snapshot):
    """Sizes of the free (cached) blocks in a snapshot dict."""
    return [b["size"] for seg in snapshot["segments"] for b in seg["blocks"]
            if b["state"] == "inactive"]


def measure(outcome: Outcome, what: str):
    """The number ``what`` names, read from the GPU or its snapshot."""
    gpu = outcome.gpu
    if what in ("memory_reserved", "memory_allocated", "max_memory_reserved",
                "max_memory_allocated"):
        return getattr(gpu, what)()
    if what == "segments":
        return len(gpu.snapshot()["segments"])
    if what == "largest_free":
        return max(inactive_blocks(gpu.snapshot()), default=0)
    if what == "cached_free":
        return sum(inactive_blocks(gpu.snapshot()))
    if what == "oom":
        return int(outcome.ooms > 0)
    if what == "num_ooms":
        return outcome.ooms
    m = _MEASURE_ARG.match(what)
    if not m:
        raise ValueError(f"unknown measure {what!r}")
    kind, arg = m.groups()
    if kind == "stat":
        return gpu.memory_stats()[arg]
    if kind == "size_of":
        return _named(outcome, arg).size
    a, b = (x.strip() for x in arg.split(","))
    return int(_named(outcome, a).address == _named(outcome, b).address)


def _named(outcome, name):
    if name not in outcome.names:
        raise ValueError(f"{name!r} is not a live allocation at the end of the ops")
    return outcome.names[name]


def compute(spec) -> float:
    """Evaluate a bank's ``compute`` mapping to a number (bytes or a count)."""
    if "expr" in spec:
        return evaluate_expr(spec["expr"])
    outcome = run_ops(spec["ops"], spec.get("total_memory", "24GiB"), spec.get("alloc_conf", ""))
    return measure(outcome, spec["measure"])


# -- arithmetic expressions (for numbers that are not allocator behaviour, e.g. model sizes) --
_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow,
        ast.Mod: operator.mod}
_NAMES = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "KB": 1000, "MB": 1000**2, "GB": 1000**3}


def evaluate_expr(expr):
    """Evaluate arithmetic over numbers and KiB/MiB/GiB/KB/MB/GB; nothing else is allowed."""
    if not isinstance(expr, str):
        raise ValueError("'expr' must be a string")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise ValueError(f"cannot parse expr {expr!r}") from None

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name) and node.id in _NAMES:
            return _NAMES[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            return _BIN[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise ValueError(f"expr {expr!r} may only use numbers, + - * / // % ** and "
                         f"{', '.join(_NAMES)}")

    return ev(tree)

"""The package's layout holds: few modules at the top, rooms that import only lower rooms, no
import cycle between modules, and an allocator that imports nothing outside itself.

The rooms, lowest first. A module may import its own room and any room below it, never one above:
allocator/ is the model; units.py, _lazy.py and cleantext.py serve everyone; devices/ run the model or real
CUDA; recordings/ read, capture and replay snapshots; viz/ reads snapshots; kvcache/ may draw with
viz/; doctor/ diagnoses recordings; planner/ plans a step before it runs, by fake-tensor capture
and replay, on doctor/'s searches; certificates/ sign results and quizkit/ issues the unsigned
self-study record through them; lessons/ holds what each lesson owns (its exercise, workload,
models), on quizkit's machinery; classroom/ grades quiz-built notebooks; cli/ sits on top.
"""
from __future__ import annotations

import ast
import pathlib

import gpumemlab

PACKAGE = pathlib.Path(gpumemlab.__file__).parent
ROOMS = ["allocator", "units", "_lazy", "cleantext", "devices", "recordings", "viz", "kvcache", "doctor",
         "planner", "certificates", "quizkit", "lessons", "classroom", "cli"]
RANK = {"allocator": 0, "units": 1, "_lazy": 1, "cleantext": 1, "devices": 2, "recordings": 3, "viz": 4,
        "kvcache": 5, "doctor": 6, "planner": 7, "certificates": 8, "quizkit": 9, "lessons": 10,
        "classroom": 11, "cli": 12}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules():
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported(path: pathlib.Path, name: str) -> set[str]:
    """Every gpumemlab module (or package) that ``path`` imports, at any depth of its code.
    ``from gpumemlab import X`` counts as importing the module that gml.X lives in."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            # a bare ``import gpumemlab`` runs only the side-effect-free root: not a room import
            found |= {a.name for a in node.names if a.name.startswith("gpumemlab.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "gpumemlab":
                continue
            for alias in node.names:
                if target == "gpumemlab" and alias.name in gpumemlab._LAZY:
                    found.add(gpumemlab._LAZY[alias.name][0])
                elif f"{target}.{alias.name}" in modules():
                    found.add(f"{target}.{alias.name}")
                else:
                    found.add(target)
    return found


def room(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def test_at_most_six_modules_at_the_top():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 6, top


def test_every_room_is_known():
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    rooms |= {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert rooms <= set(RANK), rooms - set(RANK)


def test_no_upward_import():
    upward = []
    for name, path in modules().items():
        here = room(name)
        if here is None:
            continue  # gpumemlab/__init__.py: the flat API names every room lazily
        for target in imported(path, name):
            there = room(target)
            if there is None:
                upward.append(f"{name} imports the package root")
            elif there != here and RANK[there] > RANK[here]:
                upward.append(f"{name} ({here}) imports {target} ({there})")
    assert not upward, "\n".join(sorted(upward))


def test_allocator_imports_nothing_outside_it():
    outside = [(name, target) for name, path in modules().items() if room(name) == "allocator"
               for target in imported(path, name) if room(target) != "allocator"]
    assert not outside, outside


def test_no_import_cycle_between_modules():
    graph = {name: {t for t in imported(path, name) if t in modules() and t != name}
             for name, path in modules().items()}
    # a package's __init__ importing its own submodules is not a cycle through them
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, cycles


def test_no_module_over_400_lines():
    """Small files, one idea each: every module of the package fits in 400 lines."""
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text().splitlines())) > 400}
    assert not long, long

"""What ``gml.growth`` returns: one ``Iteration`` per step with its cause and evidence (``Site``:
the allocating frames of bytes the step kept; ``Trigger``: an allocation that made reserved
memory grow), gathered in a ``GrowthReport`` that prints as a table, renders as HTML in a
notebook and draws its figure (``growth.figure``)."""
from __future__ import annotations

import html
import os
import re
import sysconfig
from dataclasses import dataclass, field

from gpumemlab.units import format_size
from gpumemlab.viz.frames import is_interpreter_frame

__all__ = ["CAUSES", "GrowthReport", "Iteration", "Site", "Trigger", "where"]

CAUSES = ("leak", "one-time state", "new shapes", "higher peak", "fragmentation", "steady")

_KNOWN_CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation")
_STDLIB = os.path.normpath(sysconfig.get_paths()["stdlib"]) + os.sep
_KERNEL_CELL = re.compile(r"ipykernel_\d+[/\\]\d+\.py$")
_INPUT_CELL = re.compile(r"<ipython-input-(\d+)-[0-9a-f]+>")


def _is_library(filename: str, name: str = "") -> bool:
    if is_interpreter_frame({"filename": filename, "name": name}):
        return True
    f = filename.replace("\\", "/")
    if ("/site-packages/" in f or "/dist-packages/" in f) and "/gpumemlab/" not in f:
        return True
    return os.path.normpath(filename).startswith(_STDLIB)


def _frame_text(fr) -> str:
    filename = fr.get("filename", "?")
    m = _INPUT_CELL.search(filename)
    if m or _KERNEL_CELL.search(filename):
        place = f"cell In[{m.group(1)}]" if m else "a notebook cell"
        return f"{place}, line {fr.get('line', 0)}"
    f = filename.replace("\\", "/")
    parts = f.split("/")
    short = "/".join(parts[parts.index("torch"):]) if "torch" in parts[:-1] else parts[-1]
    return f"{short}:{fr.get('line', 0)} in {fr.get('name', '?')}"


def where(frames) -> str:
    """One line for a stack (innermost first): the first frame of the learner's code, and the
    library frame that made the tensor when that is not the same."""
    if not frames:
        return "no frames recorded"
    user = next((f for f in frames if not _is_library(f.get("filename", ""), f.get("name", ""))),
                None)
    inner = next((f for f in frames if not is_interpreter_frame(f)), frames[0])
    if user is None:
        return _frame_text(inner)
    if user is inner:
        return _frame_text(user)
    return f"{_frame_text(user)} (via {_frame_text(inner)})"


@dataclass
class Site:
    """Bytes one iteration allocated at one place (same frames) and kept."""
    frames: list
    count: int
    bytes: int
    sizes: list
    category: str | None
    indices: list            # trace indices of the allocations
    freed_at: list           # trace index of each one's free_completed; None: never freed
    freed_by: list           # frames of the first free, when recorded
    iterations: list         # every iteration that kept bytes at this site

    @property
    def where(self) -> str:
        return where(self.frames)

    @property
    def freed_by_where(self) -> str | None:
        """Where the first free was made, or None when no free was recorded with frames."""
        return where(self.freed_by) if self.freed_by else None

    def describe(self) -> str:
        # capture infers "temporary"/"input" from phases: only the categories it knows are shown
        cat = f", {self.category}" if self.category in _KNOWN_CATEGORIES else ""
        n = "1 allocation" if self.count == 1 else f"{self.count} allocations"
        freed = [f for f in self.freed_at if f is not None]
        if not freed:
            fate = "never freed in the recording"
        else:
            fate = f"freed later (first at entry {min(freed)}"
            fate += f", by {where(self.freed_by)})" if self.freed_by else ")"
        return f"{n}, {format_size(self.bytes)}{cat}, at {self.where}; {fate}"


@dataclass
class Trigger:
    """An allocation the cache could not serve: the model reserved more memory for it."""
    index: int
    size: int
    rounded_size: int
    reserved_growth_bytes: int
    seen_at: int | None      # trace index of the first earlier allocation of this rounded size
    frames: list
    category: str | None

    @property
    def where(self) -> str:
        return where(self.frames)

    def describe(self) -> str:
        seen = ("a size never allocated before" if self.seen_at is None
                else f"a size first allocated at entry {self.seen_at}")
        return (f"entry {self.index}: {format_size(self.size)} ({seen}) reserved "
                f"{format_size(self.reserved_growth_bytes)} more, at {self.where}")


@dataclass
class Iteration:
    name: str
    number: int
    start: int               # trace index range [start, end)
    end: int
    allocated_bytes: int     # at the end of the iteration
    reserved_bytes: int
    allocated_growth_bytes: int
    reserved_growth_bytes: int
    peak_allocated_bytes: int
    earlier_peak_allocated_bytes: int
    kept: list = field(default_factory=list)       # Sites of bytes that stay
    carried: list = field(default_factory=list)    # Sites of bytes freed before the last ends
    triggers: list = field(default_factory=list)
    cause: str = "steady"

    @property
    def kept_bytes(self) -> int:
        return sum(s.bytes for s in self.kept)

    @property
    def gap_bytes(self) -> int:
        """Reserved minus allocated at the end: cached memory no tensor uses."""
        return self.reserved_bytes - self.allocated_bytes

    @property
    def why(self) -> str:
        """The cause in one sentence, with the numbers that support it."""
        grew = format_size(self.allocated_growth_bytes)
        if self.cause in ("leak", "one-time state"):
            top = self.kept[0]
            n_other = len(top.iterations) - 1
            also = (f"the same frames kept bytes in {n_other} other iteration"
                    f"{'s' if n_other != 1 else ''}" if n_other else
                    "no other iteration kept bytes there")
            return (f"allocated grew by {grew}; {format_size(self.kept_bytes)} allocated here "
                    f"stays to the end, most at {top.where}; {also}")
        if self.cause in ("new shapes", "higher peak", "fragmentation"):
            res = format_size(self.reserved_growth_bytes)
            new = [t for t in self.triggers if t.seen_at is None]
            if self.cause == "new shapes":
                return (f"reserved grew by {res} while allocated changed by {grew}; "
                        f"{len(new)} of {len(self.triggers)} cudaMalloc triggers asked for a size "
                        f"never allocated before, e.g. {format_size(new[0].size)} at "
                        f"{new[0].where}")
            peaks = (f"peak allocated {format_size(self.peak_allocated_bytes)}, earlier peak "
                     f"{format_size(self.earlier_peak_allocated_bytes)}")
            if self.cause == "higher peak":
                return (f"reserved grew by {res} while allocated changed by {grew}; every "
                        f"trigger asked for a size allocated before, but more was live at once "
                        f"than ever before ({peaks})")
            return (f"reserved grew by {res} while allocated changed by {grew}; every trigger "
                    f"asked for a size allocated before (peak allocated "
                    f"{format_size(self.peak_allocated_bytes)}, earlier peak "
                    f"{format_size(self.earlier_peak_allocated_bytes)}): free cached memory "
                    f"was there, in pieces that did not fit")
        return (f"allocated changed by {grew}, reserved by "
                f"{format_size(self.reserved_growth_bytes)}; nothing kept")

    def evidence(self) -> list:
        """Lines of evidence: what stays, what was carried, then what made reserved grow."""
        lines = [f"stays: {s.describe()}" for s in self.kept[:3]]
        lines += [f"carried: {s.describe()}" for s in self.carried[:2]]
        lines += [f"grew: {t.describe()}" for t in self.triggers[:3]]
        return lines


_COLS = ("#", "iteration", "allocated", "grew", "reserved", "grew", "stays", "cause")


def _signed(n: int) -> str:
    return ("+" if n > 0 else "-" if n < 0 else "") + format_size(abs(n))


class GrowthReport:
    """The iterations of a recording, each with its cause; ``print`` it, or show it in a cell."""

    def __init__(self, iterations, result=None, notes=(), found=None):
        self.iterations = list(iterations)
        self.result = result          # the ReplayResult the figures come from
        self.notes = list(notes)
        self.found = found or {}      # how the iterations were found (growth._spans_found)

    def as_dict(self) -> dict:
        """The JSON form (``schema_version`` 1, docs/GROWTH.md "JSON schema")."""
        from .json_form import as_dict
        return as_dict(self)

    def json(self) -> str:
        from .json_form import to_json
        return to_json(self)

    @property
    def causes(self) -> list:
        return [it.cause for it in self.iterations]

    def by_cause(self) -> dict:
        """cause -> names of the iterations it was found in (every cause a key)."""
        out = {c: [] for c in CAUSES}
        for it in self.iterations:
            out[it.cause].append(it.name)
        return out

    def rows(self) -> list:
        return [(str(it.number), it.name, format_size(it.allocated_bytes),
                 _signed(it.allocated_growth_bytes), format_size(it.reserved_bytes),
                 _signed(it.reserved_growth_bytes), format_size(it.kept_bytes), it.cause)
                for it in self.iterations]

    def text(self, evidence: bool = True) -> str:
        rows = self.rows()
        widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(_COLS)]
        line = lambda r: "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()  # noqa: E731
        out = [line(_COLS)] + [line(r) for r in rows]
        if self.found.get("method") == "auto":
            out.insert(0, f"iterations: {self.found['explanation']}")
        if evidence:
            for it in self.iterations:
                if it.cause != "steady":
                    out.append(f"{it.name} · {it.cause}: {it.why}")
                    out += [f"    {e}" for e in it.evidence()]
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)

    __str__ = text

    def __repr__(self):
        counts = ", ".join(f"{c}: {len(v)}" for c, v in self.by_cause().items() if v)
        return f"<GrowthReport: {len(self.iterations)} iterations; {counts}>"

    def _repr_pretty_(self, p, cycle):
        p.text(self.text())

    def _repr_html_(self):
        head = "".join(f"<th>{html.escape(c)}</th>" for c in _COLS)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>"
                       for r in self.rows())
        items = []
        for it in self.iterations:
            if it.cause != "steady":
                ev = "".join(f"<li>{html.escape(e)}</li>" for e in it.evidence())
                items.append(f"<li><b>{html.escape(it.name)} · {html.escape(it.cause)}</b>: "
                             f"{html.escape(it.why)}<ul>{ev}</ul></li>")
        notes = "".join(f"<p>note: {html.escape(n)}</p>" for n in self.notes)
        return (f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"<ul>{''.join(items)}</ul>{notes}")

    def figure(self, title: str | None = None):
        """Allocated and reserved at each iteration's end, coloured by cause (matplotlib)."""
        from .figure import plot_growth
        return plot_growth(self, title=title)

"""Each lesson executed once per test session, headless, top to bottom with its shipped stubs
(as nbval runs it), in a kernel whose progress file is a scratch one; a last probe cell reports
the answers its reveal cells revealed. Shared by the tests that read executed lessons
(``test_lessons_give_nothing_away``, ``tests/notebooks/test_lesson_figures.py``), so a session runs each
lesson once."""
from __future__ import annotations

import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted(p.stem[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")
                 if p.stem[:2] != "00")
PROBE = ("import json as _json, gpumemlab as _gml\n"
         "print('PROBE' + _json.dumps({i: [_gml.predict.spec(i).kind, _gml.predict.spec(i).unit, "
         "list(_gml.predict.spec(i).choices), v] for i, v in _gml.predict.revealed.items()}))")
# Wraps matplotlib's Figure.draw (as the inline backend and savefig call it) to note, for each
# figure drawn, the execution count of the cell drawing it, the titles (axes and suptitle), the
# other text a reader sees (legend labels, axis labels, annotations; not tick labels) and each
# legend entry's colour, and the legends and titles that reach past the image's edge; and wraps Figure.__init__ to note the cell making each figure. The probe
# prints both.
RECORD = """
import matplotlib.figure as _mf, matplotlib.colors as _mc, matplotlib.text as _mt
_gml_drawn = {}
def _gml_colour(h):
    if hasattr(h, "get_facecolor"):      # a patch: its face, or its edge where the face is clear
        face = _mc.to_rgba_array(h.get_facecolor())
        c = face if len(face) and face[0][3] > 0 else _mc.to_rgba_array(h.get_edgecolor())
        return _mc.to_hex(c[0]) if len(c) else None
    return _mc.to_hex(h.get_color()) if hasattr(h, "get_color") else None
def _gml_note(fig):
    titles = [t for ax in fig.axes for t in (ax.get_title(loc=l) for l in ("left", "center", "right")) if t]
    if getattr(fig, "_suptitle", None) is not None and fig._suptitle.get_text():
        titles.append(fig._suptitle.get_text())
    ticks = {id(t) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for t in axis.findobj(_mt.Text) if t is not axis.label}
    texts = [t.get_text() for t in fig.findobj(_mt.Text) if id(t) not in ticks and t.get_text()]
    legend = [[t.get_text(), _gml_colour(h)] for leg in
              list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
              for h, t in zip(leg.legend_handles, leg.get_texts())]
    return {"titles": titles, "texts": texts, "legend": legend}
def _gml_cut(fig, renderer):
    # legends and titles that reach past the edge of what was drawn (the saved image)
    box, cut = fig.bbox, []
    for a in list(fig.legends) + [x for ax in fig.axes for x in (ax.get_legend(), ax.title) if x]:
        e = a.get_window_extent(renderer)
        if a.get_visible() and (e.x0 < box.x0 - 2 or e.x1 > box.x1 + 2 or e.y0 < box.y0 - 2
                                or e.y1 > box.y1 + 2) and e.width > 0:
            cut.append(type(a).__name__ + ": " + (a.get_text() if hasattr(a, "get_text")
                       else " / ".join(t.get_text() for t in a.get_texts())[:80]))
    return cut
def _gml_wrap(draw):
    def wrapped(self, renderer, *a, **k):
        out = draw(self, renderer, *a, **k)
        n = get_ipython().execution_count
        try:
            _gml_drawn[f"{n}:{id(self)}"] = dict(_gml_note(self), n=n, cut=_gml_cut(self, renderer))
        except Exception as e:
            _gml_drawn[f"{n}:{id(self)}"] = {"n": n, "error": repr(e)}
        return out
    return wrapped
_mf.Figure.draw = _gml_wrap(_mf.Figure.draw)
_gml_made = []
def _gml_wrap_init(init):
    def wrapped(self, *a, **k):
        init(self, *a, **k)
        _gml_made.append(get_ipython().execution_count)
    return wrapped
_mf.Figure.__init__ = _gml_wrap_init(_mf.Figure.__init__)
"""
PROBE += ("\nprint('DRAWN' + _json.dumps(list(_gml_drawn.values())))"
          "\nprint('MADE' + _json.dumps(_gml_made))")
_RUNS = {}
_DRAWN = {}
_MADE = {}


def executed(key, tmp_path_factory):
    """(cells, revealed, progress) of lesson ``key`` run top to bottom, once per session."""
    import nbclient
    import nbformat

    if key not in _RUNS:
        path = next((ROOT / "notebooks").glob(f"{key}_*.ipynb"))
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(PROBE))
        nb.cells.insert(0, nbformat.v4.new_code_cell(RECORD))
        progress = tmp_path_factory.mktemp(f"lesson{key}") / "progress.json"
        env = {"GPUMEMLAB_HEADLESS": "1", "GPUMEMLAB_PROGRESS": str(progress),
               "GPUMEMLAB_QUIZ_SEED": "1", "MPLBACKEND": "Agg",
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        old = dict(os.environ)
        os.environ.update(env)
        try:
            nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                    resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:
            os.environ.clear()
            os.environ.update(old)
        probe = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
        probe, drawn_json = probe.split("DRAWN", 1)
        drawn_json, made_json = drawn_json.split("MADE", 1)
        revealed = json.loads(probe.split("PROBE", 1)[1])
        data = json.loads(progress.read_text()) if progress.exists() else {}
        cells = nb.cells[1:-1]
        # while a cell runs, IPython's execution_count is already the next cell's (ipykernel
        # replies with one less)
        by_count = {c.execution_count + 1: i for i, c in enumerate(cells)
                    if c.cell_type == "code" and c.execution_count}
        _DRAWN[key] = [dict(d, cell=by_count.get(d["n"])) for d in json.loads(drawn_json)]
        _MADE[key] = [by_count.get(n) for n in json.loads(made_json)]
        _RUNS[key] = (cells, revealed, data)
    return _RUNS[key]


def drawn(key, tmp_path_factory):
    """The figures lesson ``key`` drew, each {"cell", "titles", "texts", "legend": [[label,
    colour], ...]}, in the order drawn (a figure drawn twice by one cell counted once)."""
    executed(key, tmp_path_factory)
    return _DRAWN[key]


def made(key, tmp_path_factory):
    """The index of the cell that made each matplotlib Figure of lesson ``key``, in order."""
    executed(key, tmp_path_factory)
    return _MADE[key]

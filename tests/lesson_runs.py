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
_RUNS = {}


def executed(key, tmp_path_factory):
    """(cells, revealed, progress) of lesson ``key`` run top to bottom, once per session."""
    import nbclient
    import nbformat

    if key not in _RUNS:
        path = next((ROOT / "notebooks").glob(f"{key}_*.ipynb"))
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(PROBE))
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
        revealed = json.loads(probe.split("PROBE", 1)[1])
        data = json.loads(progress.read_text()) if progress.exists() else {}
        _RUNS[key] = (nb.cells[:-1], revealed, data)
    return _RUNS[key]

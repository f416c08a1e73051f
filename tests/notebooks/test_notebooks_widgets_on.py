"""The lessons run top to bottom with widgets on (GPUMEMLAB_HEADLESS unset, as in JupyterLab):
no error, nothing on stderr, and no output that is a bare object repr (``<... object at 0x>``,
``VBox(children=...)``). nbval runs them headless; this runs each in a real kernel through
nbclient with the widget views made, and reads every output."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from lesson_runs import LESSONS   # every lesson but 00, the set-up notebook

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipywidgets")

ROOT = Path(__file__).resolve().parents[2]
BARE = re.compile(r"<[\w.]+ object at 0x|VBox\(children=|<[\w. ]+ at 0x[0-9a-f]+>")


def _lesson(key):
    return next((ROOT / "notebooks").glob(f"{key}_*.ipynb"))


@pytest.mark.parametrize("key", LESSONS)
def test_lesson_runs_with_widgets_on(key, tmp_path, monkeypatch):
    path = _lesson(key)
    nb = nbformat.read(path, as_version=4)
    monkeypatch.delenv("GPUMEMLAB_HEADLESS", raising=False)
    monkeypatch.setenv("GPUMEMLAB_PROGRESS", str(tmp_path / "progress.json"))
    monkeypatch.setenv("GPUMEMLAB_QUIZ_SEED", "1")
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    widget_views = 0
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"cell {i}: {out.get('ename')}: {out.get('evalue')}"
            assert out.get("name") != "stderr", f"cell {i} wrote to stderr: {out.get('text')}"
            data = out.get("data", {})
            text = out.get("text", "") + data.get("text/plain", "")
            assert not BARE.search(text), f"cell {i} shows a bare repr: {text[:200]}"
            if "application/vnd.jupyter.widget-view+json" in data:
                widget_views += 1
                assert "text/html" in data, f"cell {i}: a widget without a static copy"
    assert widget_views >= 3, "the predict cells, the quiz... should show widgets"

"""Static fallbacks of widget outputs: the quiz, the player, a prediction and the what-if controls
each carry text/html and a short text/plain with their content, and an executed notebook (widgets
on, saved without widget state as JupyterLab does by default) exported with nbconvert's HTML
exporter shows the questions and the player's current frame, with no bare object repr."""
from __future__ import annotations

import os
import re

import pytest

import gpumemlab as gml

pytest.importorskip("ipywidgets")
BARE = re.compile(r"<[\w.]+ object at 0x|VBox\(children=|<[\w. ]+ at 0x[0-9a-f]+>")


def _player():
    gpu = gml.SimulatedGPU("1GiB", alloc_conf="")
    a = gpu.empty(3 * gml.MiB)
    b = gpu.empty(gml.MiB)
    del a
    return gml.player(gpu), b


def test_player_bundle_holds_the_frame():
    p, _keep = _player()
    bundle = p._repr_mimebundle_()
    assert bundle["text/plain"].startswith("player, 6 events (0..5): event 5: free completed")
    assert "event 5 of" not in bundle["text/plain"]
    assert 'src="data:image/png;base64,' in bundle["text/html"]
    assert "<table" in bundle["text/html"]
    assert not BARE.search(bundle["text/plain"] + bundle["text/html"])


def test_quiz_view_bundle_holds_the_questions(tmp_path, monkeypatch):
    from gpumemlab.quizkit.core import Quiz
    from gpumemlab.quizkit.widgets import QuizView
    monkeypatch.setenv("GPUMEMLAB_QUIZ_SEED", "1")
    quiz = Quiz(tmp_path / "p.json")
    bundle = QuizView(quiz, quiz.bank("02"))._repr_mimebundle_()
    assert bundle["text/plain"].startswith("Quiz 02: Fragmentation") and "questions; answer" in bundle["text/plain"]
    bank = quiz.bank("02")
    assert all(q.id in bundle["text/html"] for q in bank.questions)
    assert not BARE.search(bundle["text/plain"])


def test_whatif_bundle_and_update(monkeypatch):
    monkeypatch.delenv("GPUMEMLAB_HEADLESS", raising=False)

    def run(alloc_conf, total_memory):
        gpu = gml.SimulatedGPU(total_memory, alloc_conf=alloc_conf)
        x = gpu.empty(600 * gml.MiB)
        del x
        small = [gpu.empty(30 * gml.MiB) for _ in range(3)]
        try:
            big = gpu.empty(600 * gml.MiB)
        except gml.OutOfMemoryError:
            big = None
        return gpu, small, big

    w = gml.whatif(lambda **kw: run(**kw)[0], alloc_conf=["", "max_split_size_mb:256"],
                   total_memory=["1GiB", "2GiB"])
    assert "1 out-of-memory error" in w.line
    w.inputs["alloc_conf"].value = "max_split_size_mb:256"   # as the dropdown does
    assert w.values["alloc_conf"] == "max_split_size_mb:256"
    assert "no out-of-memory error" in w.line and w.last_ms > 0
    bundle = w._repr_mimebundle_()
    assert bundle["image/png"] and 'src="data:image/png' in bundle["text/html"]
    assert bundle["text/plain"].startswith("what-if at alloc_conf=max_split_size_mb:256, "
                                           "total_memory=1GiB")
    with pytest.raises(ValueError, match="unknown control"):
        w.update(batch=3)


def test_exported_html_shows_questions_and_the_player_frame(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbconvert import HTMLExporter
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cells = [
        f"import sys; sys.path.insert(0, {root!r})\nimport gpumemlab as gml",
        "gml.predict('01.p2', 'How much is reserved after a 1-byte tensor?')",
        "gpu = gml.SimulatedGPU('1GiB', alloc_conf='')\nx = gpu.empty(1)\n"
        "gml.reveal('01.p2', gpu.memory_reserved())",
        "gml.player(gpu)",
        "gml.quiz('02')",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    env = {k: v for k, v in os.environ.items() if k != "GPUMEMLAB_HEADLESS"}
    env.update(GPUMEMLAB_PROGRESS=str(tmp_path / "p.json"), GPUMEMLAB_QUIZ_SEED="1",
               MPLBACKEND="Agg")
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                         store_widget_state=False)
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    for cell in nb.cells:
        for out in cell.outputs:
            assert out.output_type != "error", out
            assert out.get("name") != "stderr", out
            plain = out.get("data", {}).get("text/plain", "") + out.get("text", "")
            assert not BARE.search(plain), plain
    html, _ = HTMLExporter().from_notebook_node(nb)
    visible = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    assert "How much is reserved after a 1-byte tensor?" in visible
    assert "Quiz 02: Fragmentation" in visible and "02.7" in visible
    assert visible.count('src="data:image/png;base64,') >= 1
    assert "player, " in visible and "VBox(children" not in visible


def test_whatif_legend_lists_only_what_the_frame_draws():
    def run(alloc_conf, total_memory):
        gpu = gml.SimulatedGPU(total_memory, alloc_conf=alloc_conf)
        gpu.record_memory_history()
        keep = [gpu.empty(300 * gml.MiB) for _ in range(3)]
        try:
            gpu.empty(600 * gml.MiB)
        except gml.OutOfMemoryError:
            pass
        return gpu, keep

    w = gml.whatif(lambda **kw: run(**kw)[0], alloc_conf=["", "expandable_segments:True"],
                   total_memory=["1GiB", "4GiB"])
    labels = [t.get_text() for t in w._legend.get_texts()]
    assert "out of memory" in labels and "expandable segment" not in labels
    w.update(alloc_conf="expandable_segments:True", total_memory="4GiB")
    labels = [t.get_text() for t in w._legend.get_texts()]
    assert "expandable segment" in labels and "out of memory" not in labels

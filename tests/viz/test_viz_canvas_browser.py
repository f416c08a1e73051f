"""The browser block map in a real browser: JupyterLab opens a notebook that shows
``gml.player`` on a seeded recording, headless Chromium runs it, moves the widget's slider to
events across the trace and reads back what the canvas drew (the widget writes the event, the
segment, live-block and free-block counts to data attributes), hovers a block and reads its
tooltip, and checks that the kernel's player followed the slider, after single moves and after a
drag (a move every animation frame), and did not pull the drawing back. The counts must equal the
kernel-side History's at each event. It also times random jumps in the browser and prints the
figures (nothing timed is asserted: ``benchmarks/bench_canvas_player.py`` measures the
100k-entry case).

Needs Debian's chromium (.ci/run installs it; skipped with a reason where it is missing) and
anywidget's JupyterLab extension, which its wheel installs: nothing is fetched at run time.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys

import pytest

from cdp_browser import LAB_STATE, free_port, start_chromium, stop, wait_http

pytest.importorskip("anywidget")
nbformat = pytest.importorskip("nbformat")

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
TOKEN = "gpumemlab-canvas-token"
N_OPS = 3000
# the geometry canvas_player.js draws with
WIDTH, LEFT, RIGHT, MAP_MAX_H = 880, 64, 8, 420
NOTEBOOK = ("[...window.jupyterapp.shell.widgets('main')]"
            ".find(w => w.sessionContext && w.content)")
ROOT_EL = "document.querySelector('.gml-canvas-player')"


def notebook_cells(n_ops: int) -> list:
    return [f"import sys\nsys.path.insert(0, {str(HERE)!r})\n"
            "import gpumemlab as gml\nfrom canvas_recording import recording\n"
            f"snap = recording({n_ops})",
            "p = gml.player(snap)\nprint(type(p.canvas_widget).__name__)\np"]


@contextlib.contextmanager
def lab_with_notebook(tmp, n_ops: int, cells=None):
    """JupyterLab on ``tmp`` holding canvas.ipynb (``cells``, default ``notebook_cells``), and
    Chromium showing it with its cells run; yields the Browser once the widget has drawn."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c)
                                         for c in cells or notebook_cells(n_ops)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbformat.write(nb, tmp / "canvas.ipynb")
    port = free_port()
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.token={TOKEN}", "--LabApp.expose_app_in_browser=True",
           f"--notebook-dir={tmp}"] + (["--allow-root"] if os.geteuid() == 0 else [])
    env = {k: v for k, v in os.environ.items() if k != "GPUMEMLAB_HEADLESS"}
    env.update(GPUMEMLAB_DEVICE="sim", MPLBACKEND="Agg",
               JUPYTER_CONFIG_DIR=str(tmp / "jupyter-config"))  # no user settings
    log = open(tmp / "lab.log", "wb")
    lab = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    chromium = None
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/status?token={TOKEN}", lab, f"JupyterLab (log {tmp / 'lab.log'})",
                  limit=90)
        chromium, browser = start_chromium(tmp / "chromium")
        try:
            browser.call("Emulation.setFocusEmulationEnabled", enabled=True)
            browser.call("Page.navigate", url=f"{base}/lab/tree/canvas.ipynb?token={TOKEN}")
            browser.wait_for(f"(() => {{ const w = window.jupyterapp && {NOTEBOOK};"
                             " const k = w && w.content.widgets.length && w.sessionContext.session"
                             " && w.sessionContext.session.kernel; return !!k && k.status === 'idle';"
                             " })()", "the notebook's kernel to be idle", limit=120)
            # started, not awaited: the command resolves when the cells have run, which on a
            # loaded machine outlasts one DevTools call (30 s); the wait below is the limit
            browser.js(f"(() => {{ const a = window.jupyterapp; const w = {NOTEBOOK};"
                       " a.shell.activateById(w.id);"
                       " a.commands.execute('notebook:run-all-cells'); return true; })()")
            browser.wait_for(f"{ROOT_EL} && {ROOT_EL}.dataset.event !== undefined",
                             f"the canvas player to draw (lab log {tmp / 'lab.log'})", limit=240)
            yield browser
        finally:
            browser.close()
    finally:
        if chromium is not None:
            stop(chromium)
        stop(lab)
        log.close()


def jump(browser, k: int) -> dict:
    """Move the widget's own slider to ``k`` as a drag does (an input event); what was drawn."""
    return browser.js(f"(() => {{ const r = {ROOT_EL}; const s = r.querySelector('input');"
                      f" s.value = {k}; s.dispatchEvent(new Event('input'));"
                      " return Object.assign({}, r.dataset); })()")


def expected_at(h, k: int) -> dict:
    h.goto(k)
    segs = [h.state.segs[a] for a in h.state.addrs]
    return {"event": str(k), "segments": str(len(segs)),
            "blocks": str(sum(len(s.starts) for s in segs)),
            "freeBlocks": str(sum(1 for s in segs for b in s.layout() if b[3] == "inactive"))}


def size_text(n: float) -> str:
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit:
            return f"{n / unit:.2f} {name}"
    return f"{int(n)} bytes"


def hover_target(h, k: int):
    """Where the first drawn row's widest live block lies on the map canvas, and that block."""
    h.goto(k)
    segs = [h.state.segs[a] for a in h.state.addrs]
    large = [s for s in segs if s.pool != "small"]
    group = large or segs
    count = len(segs) + (1 if large and len(large) < len(segs) else 0)
    row_h = max(1, min(18, MAP_MAX_H // max(1, count)))
    seg = group[0]
    width = max(2, seg.size / max(s.size for s in group) * (WIDTH - LEFT - RIGHT))
    address = max(seg.starts, key=lambda a: seg.blocks[a][0])
    size, requested, state = seg.blocks[address]
    x = LEFT + (address + size / 2 - seg.address) / seg.size * width
    return x, 4 + max(1, row_h - 2) / 2, (size, requested, state, seg)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_browser_block_map_follows_the_slider_and_the_kernel_follows_it(tmp_path):
    from .canvas_recording import recording
    from gpumemlab.viz.history import History

    h = History(recording(N_OPS))
    n = len(h)
    with lab_with_notebook(tmp_path, N_OPS) as browser:
        # the cell printed which frame it made: the browser's, not the PNG
        assert "CanvasPlayer" in browser.js(LAB_STATE)
        # read after the widgets' links have started (Play's must not pull the drawing to 0)
        first = browser.js(f"new Promise(ok => setTimeout(() =>"
                           f" ok(Object.assign({{}}, {ROOT_EL}.dataset)), 1500))")
        assert {k: first[k] for k in ("event", "segments", "blocks", "freeBlocks")} == \
            expected_at(h, n - 1)
        for k in (0, 1, n // 5, n // 2, n - 2, 17, 3 * n // 4, n - 1, n // 3):
            drawn = jump(browser, k)
            assert {key: drawn[key] for key in ("event", "segments", "blocks", "freeBlocks")} \
                == expected_at(h, k), f"event {k}"
        # the kernel's player followed the last move: its own text says the same event
        browser.wait_for(f"[...document.querySelectorAll('.widget-html')].some(e =>"
                         f" e.innerText.startsWith('event {n // 3}:'))",
                         "the kernel's description of the event the slider moved to", limit=30)

        # a drag: a move every animation frame for about a second, then the pointer rests; the
        # kernel's answers to the throttled moves must not pull the drawing back
        last = browser.js(f"(async () => {{ const r = {ROOT_EL}; const s = r.querySelector('input');"
                          " let k = 0; for (let i = 0; i < 60; i++) {"
                          f" k = 100 + i * {(n - 200) // 60}; s.value = k;"
                          " s.dispatchEvent(new Event('input'));"
                          " await new Promise(ok => requestAnimationFrame(ok)); }"
                          " await new Promise(ok => setTimeout(ok, 2000)); return k; })()")
        rested = browser.js(f"Object.assign({{}}, {ROOT_EL}.dataset)")
        assert rested["event"] == str(last), (rested["event"], last)
        browser.wait_for(f"[...document.querySelectorAll('.widget-html')].some(e =>"
                         f" e.innerText.startsWith('event {last}:'))",
                         "the kernel to follow the drag to its end", limit=30)

        k = n // 2
        jump(browser, k)
        x, y, (size, requested, state, seg) = hover_target(h, k)
        hover = browser.js(f"(() => {{ const r = {ROOT_EL}; const c = r.querySelector('canvas');"
                           " const b = c.getBoundingClientRect();"
                           f" c.dispatchEvent(new MouseEvent('mousemove', {{clientX: b.left + {x},"
                           f" clientY: b.top + {y}, bubbles: true}}));"
                           " return r.dataset.hover; })()")
        assert hover.startswith(f"{size_text(size)} {state} | requested {size_text(requested)}"), \
            hover
        number = h.state.addrs.index(seg.address)   # "seg N" numbers segments in address order
        assert f"seg {number} ({seg.pool} pool, stream {seg.stream}" in hover, hover
        assert "frame " in hover and "canvas_recording.py" in hover, hover

        # timing: random jumps, each an input event drawn synchronously
        times = json.loads(browser.js(
            f"(() => {{ const r = {ROOT_EL}; const s = r.querySelector('input'); const t = [];"
            " let seed = 7; for (let i = 0; i < 200; i++) {"
            " seed = (seed * 1103515245 + 12345) % 2147483648;"
            f" const k = seed % {n}; const t0 = performance.now(); s.value = k;"
            " s.dispatchEvent(new Event('input')); t.push(performance.now() - t0); }"
            " return JSON.stringify(t); })()"))
    print(f"\nbrowser jumps over a {n}-event recording: median {statistics.median(times):.2f} ms, "
          f"max {max(times):.2f} ms (200 random jumps)")
    assert len(times) == 200

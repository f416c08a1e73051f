"""Speed of gml.player's browser block map on a 100k-entry recording, beside the PNG player.

    python benchmarks/bench_canvas_player.py [n_ops]

Kernel side: the seeded recording of tests/viz/canvas_recording.py (about 1.5 trace entries an
operation: 66,400 operations make about 100k entries), its History, the compact payload
(``gpumemlab.viz.compact.encode``: time and bytes). Browser side (JupyterLab and headless
Chromium, as tests/viz/test_viz_canvas_browser.py opens them): random jumps of the widget's
slider, each one input event drawn synchronously (target: <= 50 ms), and a drag: 120 slider
moves one animation frame apart, timed from frame to frame (target: 16.7 ms, 60 per second;
a headless browser paces frames itself, so read it as an upper bound). Beside them, random
jumps of the PNG player (``canvas=False``) on the same recording, in this process. Prints
figures and ratios; asserts nothing. Needs Debian's chromium.
"""
from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "tests", ROOT / "tests" / "viz"):
    sys.path.insert(0, str(folder))
os.environ.setdefault("MPLBACKEND", "Agg")

JUMP_TARGET_MS, FRAME_TARGET_MS = 50.0, 1000 / 60


def quantiles(times):
    times = sorted(times)
    return (f"median {statistics.median(times):.2f} ms, p95 {times[int(0.95 * len(times))]:.2f} "
            f"ms, max {times[-1]:.2f} ms")


def main(n_ops: int) -> None:
    from canvas_recording import recording
    from gpumemlab.viz import compact
    from gpumemlab.viz.history import History
    from test_viz_canvas_browser import ROOT_EL, lab_with_notebook

    t = time.perf_counter()
    snap = recording(n_ops)
    t_rec = time.perf_counter() - t
    t = time.perf_counter()
    h = History(snap)
    t_hist = time.perf_counter() - t
    t = time.perf_counter()
    meta, data = compact.encode(h)
    t_enc = time.perf_counter() - t
    n = len(h)
    print(f"recording: {n_ops} operations, {n} trace entries ({t_rec:.1f} s); History "
          f"{t_hist:.2f} s; payload: {meta['n_segments']} segment and {meta['n_blocks']} block "
          f"records, {len(data) / 2**20:.2f} MiB binary + {len(json.dumps(meta)) / 1024:.1f} KiB "
          f"JSON, encoded in {t_enc:.2f} s")

    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        with lab_with_notebook(Path(tmp), n_ops) as browser:
            t_open = time.perf_counter() - t
            jumps = json.loads(browser.js(
                f"(() => {{ const r = {ROOT_EL}; const s = r.querySelector('input'); const t = [];"
                " let seed = 11; for (let i = 0; i < 500; i++) {"
                " seed = (seed * 1103515245 + 12345) % 2147483648;"
                f" const k = seed % {n}; const t0 = performance.now(); s.value = k;"
                " s.dispatchEvent(new Event('input')); t.push(performance.now() - t0); }"
                " return JSON.stringify(t); })()"))
            frames = json.loads(browser.js(
                f"(async () => {{ const r = {ROOT_EL}; const s = r.querySelector('input');"
                " const t = []; let last = performance.now();"
                " for (let i = 0; i < 120; i++) {"
                f" s.value = Math.floor(i * {n} / 120); s.dispatchEvent(new Event('input'));"
                " await new Promise(ok => requestAnimationFrame(ok));"
                " const now = performance.now(); t.push(now - last); last = now; }"
                " return JSON.stringify(t.slice(1)); })()"))
            drawn = browser.js(f"Object.assign({{}}, {ROOT_EL}.dataset)")
    print(f"browser: notebook run and first frame drawn {t_open:.0f} s after Lab started; "
          f"last frame: {drawn['segments']} segments, {drawn['blocks']} live blocks")
    print(f"browser random jump (500): {quantiles(jumps)}; median / target "
          f"{statistics.median(jumps) / JUMP_TARGET_MS:.3f}")
    print(f"browser drag, frame to frame (119): {quantiles(frames)}; median / 16.7 ms "
          f"{statistics.median(frames) / FRAME_TARGET_MS:.2f}")

    import gpumemlab as gml
    p = gml.player(h, canvas=False)
    rng = random.Random(3)
    png = []
    for _ in range(12):
        k = rng.randrange(n)
        t = time.perf_counter()
        p.goto(k)
        png.append((time.perf_counter() - t) * 1000)
    print(f"PNG player random jump (12, same recording): {quantiles(png)}")
    print(f"ratio PNG / browser, median jump: "
          f"{statistics.median(png) / statistics.median(jumps):.0f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 66_400)

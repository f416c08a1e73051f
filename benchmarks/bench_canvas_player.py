"""Speed of gml.player's browser block map on a 100k-entry recording, beside the PNG player.

    python benchmarks/bench_canvas_player.py [n_ops]

Kernel side: the seeded recording of tests/viz/canvas_recording.py (about 1.5 trace entries an
operation: 66,400 operations make about 100k entries), its History, the compact payload
(``gpumemlab.viz.compact.encode``: time and bytes). Browser side (JupyterLab and headless
Chromium, as tests/viz/test_viz_canvas_browser.py opens them): random jumps of the widget's
slider, each one input event drawn synchronously (target: <= 50 ms); then 240 animation frames
each of an idle page (the pace the headless browser keeps by itself), of a drag (a slider move
every frame) and of a zoom (a wheel step over the map every frame), timed from frame to frame by
requestAnimationFrame's timestamps (target: 16.7 ms, 60 per second), with the time our code
took in each frame beside it: the rest of a frame is the browser's (style, layout, paint,
compositing, which headless Chromium does in software). Beside them, random
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
# 240 animation frames, one action in each (``move``, with i the frame number); the gaps are the
# differences of requestAnimationFrame's timestamps, the work is the time the action took
# frames over 50 ms are reported by Chromium's long-animation-frame entries: how much of each went
# to scripts (and which: the invoker), and how much to style, layout and paint after them
FRAMES = ("(async () => {{ const r = {root}; const s = r.querySelector('input'); const n = {n};"
          " const gaps = [], work = [], long = []; let last = null;"
          " const seen = new PerformanceObserver(l => long.push(...l.getEntries()));"
          " seen.observe({{type: 'long-animation-frame'}});"
          " for (let i = 0; i < 240; i++) {{"
          " const now = await new Promise(ok => requestAnimationFrame(ok));"
          " if (last !== null) gaps.push(now - last); last = now;"
          " const t0 = performance.now(); {move} work.push(performance.now() - t0); }}"
          " long.push(...seen.takeRecords()); seen.disconnect();"
          " const end = e => e.startTime + e.duration;"
          " return JSON.stringify({{gaps: gaps.slice(1), work, long: long.map(e => ({{"
          " ms: e.duration, render: e.renderStart ? end(e) - e.renderStart : 0,"
          " layout: e.styleAndLayoutStart ? end(e) - e.styleAndLayoutStart : 0,"
          " scripts: e.scripts.map(x => [x.invoker, x.duration])}}))}}); }})()")


def long_frames(run) -> str:
    """Where the long frames' time went: scripts (by invoker) and rendering."""
    long = run["long"]
    if not long:
        return "no frame over 50 ms"
    by = {}
    for frame in long:
        for invoker, ms in frame["scripts"]:
            by[invoker] = by.get(invoker, 0) + ms
    top = ", ".join(f"{name or '?'} {ms:.0f} ms" for name, ms in
                    sorted(by.items(), key=lambda kv: -kv[1])[:4])
    return (f"{len(long)} frames over 50 ms, {sum(f['ms'] for f in long):.0f} ms in all: "
            f"scripts {sum(sum(ms for _, ms in f['scripts']) for f in long):.0f} ms ({top}); "
            f"style, layout and paint {sum(f['render'] for f in long):.0f} ms")


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
                " return JSON.stringify(t); })()", limit_s=300))
            idle = json.loads(browser.js(FRAMES.format(root=ROOT_EL, n=n, move=""), limit_s=300))
            drag = json.loads(browser.js(FRAMES.format(root=ROOT_EL, n=n, move=(
                "s.value = Math.floor(i * n / 240); s.dispatchEvent(new Event('input'));")),
                limit_s=300))
            zoom = json.loads(browser.js(FRAMES.format(root=ROOT_EL, n=n, move=(
                "const m = r.querySelector('canvas'), b = m.getBoundingClientRect();"
                " m.dispatchEvent(new WheelEvent('wheel', {deltaY: i < 120 ? -100 : 100,"
                " clientX: b.left + 300, clientY: b.top + 10, bubbles: true,"
                " cancelable: true}));")),
                limit_s=300))
            drawn = browser.js(f"Object.assign({{}}, {ROOT_EL}.dataset)")
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"browser: notebook run and first frame drawn {t_open:.0f} s after Lab started; "
          f"last frame: {drawn['segments']} segments, {drawn['blocks']} live blocks; in the "
          f"browser, the recording loaded (columns, stacked timeline, first frame) in "
          f"{drawn['loadMs']} ms")
    print(f"browser random jump (500): {quantiles(jumps)}; median / target "
          f"{statistics.median(jumps) / JUMP_TARGET_MS:.3f}")
    for name, run in (("idle page, no input (the browser's own pace)", idle),
                      ("drag, a slider move every frame", drag),
                      ("zoom, a wheel step every frame", zoom)):
        gaps, work = run["gaps"], run["work"]
        print(f"browser {name}: frame to frame (rAF timestamps, {len(gaps)}) {quantiles(gaps)}; "
              f"{1000 / statistics.median(gaps):.0f} frames/s; median / 16.7 ms "
              f"{statistics.median(gaps) / FRAME_TARGET_MS:.2f}; in our code per frame "
              f"{quantiles(work)}; {long_frames(run)}")
    print(f"load average while the browser ran: {load}")

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

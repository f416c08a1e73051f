"""Time and memory on hostile inputs: crafted pickles and certificate pages.

    python benchmarks/bench_hostile_inputs.py

Prints, for each input, the wall time and the growth of the process's peak memory (ru_maxrss):
a 24-byte pickle with a memo index of 2**27 and 2**28 (the C unpickler alone takes 2.1 and
4.2 GB), the same index after 9 MiB of padding (read by the C unpickler under RLIMIT_AS), and
``certificate verify``-style extraction from 1 and 4 MiB pages of repeated unclosed
``<script id="gml-certificate">`` tags (the old regex: 98 s and over 120 s), and a genuine page
with 18 and 72 KB of unclosed ``<a>x`` tags added (the field reader looked up each text's field
through every open tag: 0.17 and 2.1 s before, quadratic; 0.04 and 0.12 s now).

Replay cost per byte: recordings of segment_map/alloc/free/segment_unmap cycles of a 3 TiB
tensor under ``expandable_segments:True`` (157,000 large pages a map), of about 9 KB and 1 MiB,
loaded and replayed as ``gpumemlab verify`` does. Mapping page by page took 3.5 s for the 9 KB
file and 564 s for the 1 MiB one (load average about 8); as page ranges the work follows the
entries. The run fails
(exit 1) when the 1 MiB file costs more than 4x per byte what the 9 KB one does, or over 30 s.

Value checks at load (nesting depth, integers beyond 64 bits): the load time of a 14 MiB,
200,000-entry recording with and without them.

The grader's inputs (``grader_bounds``), each with its bound asserted: the 10.ex answer
``out`` + ``.clone()`` * 200,000 (1.6 MB; judged in the grader's process it took 114 s and
1.7 GB, and passed), judged directly and through the judging workers; an answer that runs past
the per-answer wall limit; a notebook cell with 60,000 outputs of an unknown type (nbformat's
validation: about 30 s and 2.3 GB per MiB) and the largest notebooks the caps let through; and,
where bubblewrap runs, a sandbox holding 1,152 MiB in a memfd under a 1 GiB limit.
"""
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(label, fn, max_s=None, max_mib=None):
    before, t = peak_mib(), time.perf_counter()
    try:
        got = fn()
        outcome = "accepted" if got is None else str(got)[:70]
    except Exception as exc:  # the point is the message, not a traceback
        outcome = f"{type(exc).__name__}: {str(exc)[:70]}"
    seconds, grown = time.perf_counter() - t, peak_mib() - before
    print(f"{label:<44} {seconds:8.3f} s  peak +{grown:7.1f} MiB  {outcome}")
    assert max_s is None or seconds <= max_s, f"{label}: {seconds:.1f} s, bound {max_s} s"
    assert max_mib is None or grown <= max_mib, f"{label}: +{grown:.0f} MiB, bound {max_mib}"


def replay_cycles(cycles):
    """(file bytes, seconds to load and replay) for a recording of ``cycles`` map cycles."""
    import pickle

    from gpumemlab.allocator import DeviceCachingAllocator
    from gpumemlab.allocator.config import AllocatorConfig
    from gpumemlab.recordings.files import loads_snapshot
    from gpumemlab.recordings.replay import replay

    alloc = DeviceCachingAllocator(1 << 42, AllocatorConfig.parse("expandable_segments:True"),
                                   record_context=None)
    for _ in range(cycles):
        alloc.free(alloc.malloc(3 << 40))
        alloc.empty_cache()
    data = pickle.dumps(alloc.snapshot())
    t = time.perf_counter()
    result = replay(loads_snapshot(data))
    wall = time.perf_counter() - t
    assert result.reproduced and result.allocations == cycles
    return len(data), wall


def bench_replay_per_byte():
    rows = [replay_cycles(n) for n in (34, 4400)]
    for nbytes, wall in rows:
        print(f"replay of map/unmap cycles, {nbytes / 1024:7.1f} KB {wall:8.3f} s  "
              f"{wall / nbytes * 1e6:7.2f} us/byte")
    (small, t_small), (big, t_big) = rows
    ratio = (t_big / big) / (t_small / small)
    print(f"per-byte cost, 1 MiB file / 9 KB file: x{ratio:.2f} (bound: x4, and under 30 s)")
    return ratio <= 4 and t_big < 30


def bench_value_checks(entries=200_000):
    """Load time of a seeded recording with and without the value checks (depth, huge ints)."""
    import pickle

    from bench_replay import make_recording
    from gpumemlab.recordings import files

    data = pickle.dumps(make_recording(entries))
    real = files.check_values
    try:
        for on in (True, False, True, False):
            files.check_values = real if on else (lambda *args: None)
            t = time.perf_counter()
            files.loads_snapshot(data)
            print(f"load {len(data) >> 20} MiB, {entries} entries, value checks "
                  f"{'on ' if on else 'off'}   {time.perf_counter() - t:8.3f} s")
    finally:
        files.check_values = real


def main():
    import pickle

    from gpumemlab.certificates.record import load_certificate
    from gpumemlab.recordings.files import loads_snapshot

    for exp in (27, 28):
        data = b"\x80\x04N" + b"r" + (2**exp).to_bytes(4, "little") + b"."
        measure(f"pickle, {len(data)} bytes, memo index 2**{exp}", lambda d=data: loads_snapshot(d))
    pad = pickle.dumps({"segments": [], "pad": "x" * (9 << 20)}, protocol=2)
    data = pad[:-1] + b"r" + (2**31).to_bytes(4, "little") + b"."
    measure(f"pickle, {len(data) >> 20} MiB, memo index 2**31", lambda: loads_snapshot(data))
    unit = '<script type="application/json" id="gml-certificate">'
    with tempfile.TemporaryDirectory() as tmp:
        for mib in (1, 4):
            page = Path(tmp) / f"page{mib}.html"
            page.write_text(unit * ((mib << 20) // len(unit) - 1))
            measure(f"certificate page, {mib} MiB of unclosed tags",
                    lambda p=page: load_certificate(p))
        from gpumemlab.certificates.record import (generate_keypair, issue_certificate,
                                                   verify_certificate)
        priv, pub = generate_keypair(Path(tmp) / "keys")
        paths = issue_certificate("Ada", "GPU 101", 45, 50, "2025-05-01", priv).write(
            tmp, "ada", png=False)
        page = paths["html"].read_text()
        for n in (4500, 18000):      # 18,000 is the most that fits the field-by-field reading
            bad = Path(tmp) / f"unclosed{n}.html"
            bad.write_text(page.replace("</body>", "<a>x" * n + "</body>"))
            measure(f"certificate verify, {bad.stat().st_size >> 10} KB, {n} unclosed tags",
                    lambda p=bad: verify_certificate(p, pub))
    bench_value_checks()
    grader_bounds()
    if not bench_replay_per_byte():
        sys.exit(1)


def grader_bounds():
    import json

    from gpumemlab.classroom.judge_pool import LIMITS, JudgePool
    from gpumemlab.classroom.submission import SIZE_LIMIT, parse_submission
    from gpumemlab.lessons import judge

    attack = "out" + ".clone()" * 200_000 + ".argmax(1).tolist()"
    measure("10.ex attack, judged directly", lambda: judge("10.ex", attack).message,
            max_s=1, max_mib=16)
    request = {"question": "10.ex", "name": "keep", "probes": None, "kind": "exercise",
               "call_if_callable": True}
    pool, slow = JudgePool(), JudgePool({"wall_s": 2})
    try:
        measure("judging worker start + a right 10.ex answer",
                lambda: pool.judge(request, {"ok": True, "value": "out.argmax(1).tolist()"}, "s"),
                max_s=LIMITS["wall_s"] + 20, max_mib=16)
        measure("10.ex attack, through the judging worker",
                lambda: pool.judge(request, {"ok": True, "value": attack}, "s"), max_s=1,
                max_mib=16)
        slow.judge(request, {"ok": True, "value": "out"}, "s")   # started and warm
        measure("an answer past a 2 s wall limit (10.ex)",
                lambda: slow.judge(request, {"ok": True, "value": "out.argmax(1).tolist()"},
                                   "s"), max_s=4, max_mib=16)
    finally:
        pool.close()
        slow.close()
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"{'  largest judging process (worker or child)':<44} {children:8.0f} MiB peak")
    assert children <= (LIMITS["memory_bytes"] >> 20) + 1024
    import nbformat  # noqa: F401  (imported once per grading run, not per notebook)

    cell = {"cell_type": "code", "source": "x = 1", "metadata": {}, "execution_count": None,
            "outputs": [{"output_type": "weird", "n": i} for i in range(60_000)]}
    bomb = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4}).encode()
    measure(f"notebook, one cell, 60,000 unknown outputs ({len(bomb) >> 10} KiB)",
            lambda: f"{len(parse_submission(bomb).cells)} cell read", max_s=5, max_mib=200)
    ints = b'{"cells": [], "pad": [' + b"1," * ((SIZE_LIMIT - 64) // 2) + b'1]}'
    measure(f"notebook, {len(ints) >> 20} MiB of numbers (the size cap)",
            lambda: f"{len(parse_submission(ints).cells)} cells", max_s=10, max_mib=400)
    text = json.dumps({"cells": [{"cell_type": "code", "source": "x" * (1 << 20)}] * 15})
    measure(f"notebook, {len(text) >> 20} MiB of cell sources",
            lambda: f"{len(parse_submission(text.encode()).cells)} cells", max_s=5, max_mib=400)
    sandbox_memfd()


def sandbox_memfd():
    import os
    import subprocess

    from gpumemlab.classroom import isolation

    if isolation.unavailable_reason():
        print(f"sandbox memfd: skipped ({isolation.unavailable_reason()})")
        return
    code = ("import os\ntry:\n    fd = os.memfd_create('hold')\n    for _ in range(1152):\n"
            "        os.write(fd, b'x' * (1 << 20))\n    print('held 1152 MiB')\n"
            "except OSError as exc:\n    print('refused:', exc.strerror)\n")
    with tempfile.TemporaryDirectory() as tmp:
        dirs = [Path(tmp) / n for n in ("home", "io", "kit")]
        for d in dirs:
            d.mkdir()
            os.chmod(d, 0o755)
        argv, fds, cleanup = isolation.sandboxed_command(*dirs, [sys.executable, "-c", code],
                                                         memory_bytes=1 << 30)
        try:
            measure("sandbox: memfd of 1,152 MiB under 1 GiB",
                    lambda: subprocess.run(argv, pass_fds=fds, capture_output=True, text=True,
                                           timeout=120).stdout.strip(), max_s=30)
        finally:
            cleanup()


if __name__ == "__main__":
    main()

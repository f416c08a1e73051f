"""Time and memory on hostile inputs: crafted pickles and certificate pages.

    python benchmarks/bench_hostile_inputs.py

Prints, for each input, the wall time and the growth of the process's peak memory (ru_maxrss):
a 24-byte pickle with a memo index of 2**27 and 2**28 (the C unpickler alone takes 2.1 and
4.2 GB), the same index after 9 MiB of padding (read by the C unpickler under RLIMIT_AS), and
``certificate verify``-style extraction from 1 and 4 MiB pages of repeated unclosed
``<script id="gml-certificate">`` tags (the old regex: 98 s and over 120 s).
"""
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(label, fn):
    before, t = peak_mib(), time.perf_counter()
    try:
        fn()
        outcome = "accepted"
    except Exception as exc:  # the point is the message, not a traceback
        outcome = f"{type(exc).__name__}: {str(exc)[:70]}"
    print(f"{label:<44} {time.perf_counter() - t:8.3f} s  peak +{peak_mib() - before:7.1f} MiB"
          f"  {outcome}")


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


if __name__ == "__main__":
    main()

"""``certificate verify`` on tag soup: a genuine certificate page with 10, 30 and 70 KB of
unclosed ``<a `` start tags added where the name is shown.

    python benchmarks/bench_certificate_soup.py

Prints the time ``html_mismatch`` (the reason a page differs from its certificate) takes on
each page; the field reader was Python's HTMLParser, which rescans an unclosed start tag for
each one that follows (issue 34: 17 KB 5-11 s, 62 KB 157 s). Fails (exit 1) when the 70 KB page
costs more than 8x per byte what the 10 KB one does, or any page takes over 2 s. (A page
far larger than the rendering, beyond about 80 KB here, is called edited without a reading.)
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def seconds_for(kib: int) -> float:
    from gpumemlab.certificates.record import completion_record
    from gpumemlab.certificates.render import html_mismatch, render_html

    cert = completion_record("Ada Lovelace", "GPU memory", 9, 10, date="2026-12-01")
    page = render_html(cert)
    soup = "<a " * (kib * 1024 // 3)
    hostile = page.replace('data-field="name">', 'data-field="name">' + soup, 1)
    start = time.perf_counter()
    reason = html_mismatch(cert, hostile)
    took = time.perf_counter() - start
    print(f"{len(soup) >> 10:4d} KB of '<a ': {took:8.4f} s  {reason[:60]!r}")
    return took


def main() -> int:
    times = {kib: seconds_for(kib) for kib in (10, 30, 70)}
    per_byte = {k: t / k for k, t in times.items()}
    ratio = per_byte[70] / max(per_byte[10], 1e-9)
    print(f"cost per byte, 70 KB / 10 KB: {ratio:.2f}x")
    ok = ratio <= 8 and max(times.values()) <= 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The skips of one ``scripts/torch_matrix.sh`` leg, read from pytest's JUnit XML report: each is
printed with its reason, and any skip the matrix does not allow fails the leg, so that a torch build
the kit cannot work with is a failure, never a skip (issue 33 item 1).

Allowed, by the reason's first words (the tests write them so):

* ``CPU builds only:`` where the torch under test is a CUDA build (the case checks a CPU build's
  fallback, which a CUDA build does not take);
* ``needs root:`` where the leg runs as another user (a folder owned by someone else cannot be
  made without root).

Everything else (a missing compiler, an import that failed, a build that could not be made) fails.
Usage: ``python scripts/torch_matrix_skips.py REPORT.xml cuda|cpu``; exits 1 on a skip not allowed.
"""
from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET


def skips(report: str) -> list[tuple[str, str]]:
    """(test id, reason) for each skipped test in the report."""
    out = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for skipped in case.findall("skipped"):
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            out.append((test, skipped.get("message", "") or (skipped.text or "").strip()))
    return out


def allowed(reason: str, build: str, uid: int) -> bool:
    """Is a skip with this reason one the matrix allows on this build (``cuda`` or ``cpu``)?"""
    reason = reason.removeprefix("Skipped: ").strip()
    if reason.startswith("CPU builds only:"):
        return build == "cuda"
    if reason.startswith("needs root:"):
        return uid != 0
    return False


def main(argv: list[str]) -> int:
    report, build = argv
    bad = 0
    for test, reason in skips(report):
        ok = allowed(reason, build, os.geteuid())
        bad += not ok
        print(f"torch_matrix: {'allowed' if ok else 'NOT ALLOWED'} skip: {test}: {reason}")
    if bad:
        print(f"torch_matrix: FAILED: {bad} skip(s) not allowed on a {build} build "
              "(a build failure is a failure, never a skip)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

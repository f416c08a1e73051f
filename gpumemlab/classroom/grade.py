"""Grade a folder of submissions against a source notebook, each in its own kernel.

For every student: copy their folder to a fresh temporary directory (the teacher's files are only
ever read), rebuild the notebook from the source (``build``), run it in a worker process
(``runner``) with a per-cell timeout, and kill the worker and its kernel at the per-notebook wall
limit. A small thread pool runs a few workers at once; one broken submission never stops the
others. Results: ``grades.csv`` with nbgrader's export columns, and per student a Gradescope
``results.json`` and a readable ``feedback.txt``. One progress line per student goes to stderr.

Submission layout: ``SUBMISSIONS/<student_id>/.../<notebook>.ipynb`` (nbgrader's
``submitted/<student>/<assignment>/`` works), with an optional ``timestamp.txt`` beside it.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from .build import build_graded, tests_of

CSV_COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
               "email", "raw_score", "late_submission_penalty", "score", "max_score"]


@dataclass
class StudentResult:
    student_id: str
    tests: list                      # [{name, score, max_score, output, status}]
    score: float
    max_score: float
    seconds: float
    timestamp: str = ""
    notes: list = field(default_factory=list)


def read_notebook(path):
    import nbformat

    return nbformat.read(str(path), as_version=4)


def find_submissions(root: Path, notebook_name: str) -> list:
    """[(student_id, student folder, notebook path or None)], sorted by student id."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"submissions folder {root} does not exist")
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        hits = sorted(p for p in folder.rglob(notebook_name) if not p.is_symlink())
        if not hits:
            others = sorted(p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints"
                            not in p.parts and not p.is_symlink())
            hits = others[:1] if len(others) == 1 else []
        found.append((folder.name, folder, hits[0] if hits else None))
    return found


def _kill_group(pid) -> None:
    if not pid:
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def grade_one(source_nb, student_id, folder, notebook, *, deny_roots, cell_timeout=30,
              timeout=300, keep=None) -> StudentResult:
    """Grade one submission; never raises for anything the submission does."""
    started = time.monotonic()
    tests = tests_of(source_nb)
    notes, student_nb = [], None
    base = Path(tempfile.mkdtemp(prefix="gml-grade-"))
    home, private = base / "submission", base / "grader"
    private.mkdir()
    try:
        if folder is not None:
            shutil.copytree(folder, home, symlinks=True)
        else:
            home.mkdir()
        if notebook is None:
            notes.append("no notebook found in the submission")
        else:
            try:
                student_nb = read_notebook(home / Path(notebook).relative_to(folder))
            except Exception as exc:   # any unreadable file: grade as empty, say why
                notes.append(f"could not read the notebook: {type(exc).__name__}: {exc}")
        key, token = secrets.token_bytes(32), secrets.token_hex(8)
        graded = build_graded(source_nb, student_nb, home=home,
                              deny_roots=list(deny_roots) + [str(private)], key=key, token=token)
        import nbformat

        nbformat.write(graded, str(private / "graded.ipynb"))
        from .sandbox import trusted_sys_path

        job = {"notebook": str(private / "graded.ipynb"), "workdir": str(home),
               "private": str(private), "result": str(private / "result.json"),
               "cell_timeout": cell_timeout, "seed": student_id,
               "pythonpath": trusted_sys_path()}
        (private / "job.json").write_text(json.dumps(job), encoding="utf-8")
        state = _run_worker(private, timeout, notes)
    finally:
        if keep is not None:
            shutil.copytree(base, Path(keep) / student_id, dirs_exist_ok=True, symlinks=True)
        shutil.rmtree(base, ignore_errors=True)
    rows = []
    for gid, pts in tests:
        verdict = state.get("tests", {}).get(gid)
        passed = bool(verdict and verdict["passed"])
        output = "" if passed else (verdict or {}).get("output") or "test cell did not run"
        rows.append({"name": gid, "score": pts if passed else 0.0, "max_score": pts,
                     "status": "passed" if passed else "failed", "output": output})
    for ev in state.get("events", []):
        if ev["event"] in ("timeout", "kernel died"):
            notes.append(f"a {ev.get('role') or 'notebook'} cell"
                         f"{' (' + ev['grade_id'] + ')' if ev.get('grade_id') else ''}"
                         f" stopped: {ev['event']}; it was skipped and the rest re-run")
    timestamp = ""
    if folder is not None:
        stamp = next(iter(sorted(Path(folder).rglob("timestamp.txt"))), None)
        if stamp is not None and not stamp.is_symlink():
            timestamp = stamp.read_text(encoding="utf-8", errors="replace").strip()[:64]
    return StudentResult(student_id, rows, sum(r["score"] for r in rows),
                         sum(r["max_score"] for r in rows), time.monotonic() - started,
                         timestamp, notes)


def _run_worker(private: Path, timeout: float, notes: list) -> dict:
    result = private / "result.json"
    from .sandbox import trusted_sys_path

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(trusted_sys_path()))
    log = open(private / "worker.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "gpumemlab.classroom.runner",
                             str(private / "job.json")], stdout=log, stderr=log, env=env,
                            start_new_session=True, cwd=str(private))
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        notes.append(f"the notebook hit the {timeout:g} s limit; tests not reached score 0")
    finally:
        state = _read_state(result)
        _kill_group(proc.pid)
        _kill_group(state.get("kernel_pid"))
        proc.wait()
        log.close()
    if not state.get("finished") and not any("limit" in n for n in notes):
        notes.append("the grader could not finish this notebook; see the test outputs")
    return state


def _read_state(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def grade_all(source_path, submissions, *, workers=2, cell_timeout=30, timeout=300,
              progress=sys.stderr, keep=None) -> list:
    """Grade every submission in parallel; returns StudentResults sorted by student id."""
    source_path = Path(source_path)
    source_nb = read_notebook(source_path)
    from .cells import validate_source

    validate_source(source_nb)
    subs = find_submissions(Path(submissions), source_path.name)
    deny = [str(source_path.resolve().parent), str(Path(submissions).resolve())]
    results, n = [], len(subs)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = {pool.submit(grade_one, source_nb, sid, folder, nbp, deny_roots=deny,
                               cell_timeout=cell_timeout, timeout=timeout, keep=keep): sid
                   for sid, folder, nbp in subs}
        for done, fut in enumerate(as_completed(futures), 1):
            sid = futures[fut]
            try:
                res = fut.result()
            except Exception as exc:  # a grader bug must not lose the other students
                res = StudentResult(sid, [], 0.0, sum(p for _, p in tests_of(source_nb)), 0.0,
                                    notes=[f"grader error: {type(exc).__name__}: {exc}"])
            results.append(res)
            if progress is not None:
                print(f"[{done}/{n}] {sid}: {res.score:g}/{res.max_score:g} "
                      f"in {res.seconds:.1f} s", file=progress, flush=True)
    return sorted(results, key=lambda r: r.student_id)

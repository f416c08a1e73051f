"""Grade a folder of submissions against a source notebook, each in its own OS sandbox.

For every student: copy their folder to a fresh temporary directory (regular files and folders
only; the teacher's files are only ever read), rebuild the notebook from the source (``build``),
and run the notebook executor (``runner``), kernel and all, inside a bubblewrap sandbox
(``isolation``) that sees only the system, the student kit and that copy. The executor sends back
JSON only: the answers the judges asked for and the verdicts of the checks that run inside; the
answers are judged here (``verdicts``). The sandbox is killed at the per-notebook wall limit. A small
thread pool grades a few submissions at once; one broken submission never stops the others.
Without the sandbox (``--no-sandbox``) a root grader runs each executor as an unprivileged uid
of its own (``isolation.unprivileged``, ``isolation.worker``); where it cannot, nothing runs
(``RootRunsRefused``) unless the teacher asked for runs as root (``allow_root``).
Results: ``grades.csv`` with nbgrader's export columns, and per student a Gradescope
``results.json``, a readable ``feedback.txt`` and a ``feedback.html`` page (``reports``).

Submission layout: ``SUBMISSIONS/<student_id>/.../<notebook>.ipynb`` (nbgrader's
``submitted/<student>/<assignment>/`` works), with an optional ``timestamp.txt`` beside it.
"""
from __future__ import annotations

import json
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from . import isolation, variants
from .isolation import unprivileged
from .isolation.space import RUN_DISK_BYTES, RunSpace
from .build import build_graded, student_answers, test_parts, tests_of
from .intake import COPY_LIMIT_BYTES, copy_submission, display_id, find_notebook, find_submissions, read_timestamp
from .keep_copy import not_regular_entries
from .late import apply_late
from .unsandboxed import ALLOW_ROOT_FLAG, unsandboxed_warnings  # noqa: F401 (grade.unsandboxed_warnings)
from .isolation.worker import decode as _decode
from .isolation.worker import run_worker as _run_worker

CSV_COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
               "email", "raw_score", "late_submission_penalty", "score", "max_score"]
NOT_ISOLATED = ("NOT ISOLATED: this notebook ran without the OS sandbox (--no-sandbox); its "
                "code could read and change anything the grader's user can")
NOT_ISOLATED_NOBODY = ("NOT ISOLATED: this notebook ran without the OS sandbox (--no-sandbox), "
                       "as an unprivileged user of its own: its code could reach the network and "
                       "read the system's and the temporary folders (where the kernel has no "
                       "Landlock, what any user of the machine can), not the grader's own files")
INSIDE_ONLY = "checked inside the submission"
ANSWER_LIMIT = 20_000            # characters of one answer shown back to its student
LIMITS = {"cpu_s": 0, "memory_bytes": 8 << 30, "processes": 256, "file_bytes": 32 << 20,
          "open_files": 256}


class _NothingToRun(Exception):
    pass


class SandboxUnavailable(RuntimeError):
    """bwrap cannot run here; the message says why and what to do."""


class RootRunsRefused(RuntimeError):
    """A root grader without the sandbox cannot run submissions as an unprivileged user, and
    was not asked to run them as root: nothing is run. ``reason``: the probe's one line."""

    def __init__(self, reason: str, flag: str = ALLOW_ROOT_FLAG):
        self.reason = reason
        super().__init__(
            f"cannot run submissions as an unprivileged user ({reason}), and they are not run "
            f"as root unless asked: install the kit where any user can read and start it (a "
            f"venv outside /root, e.g. python3 -m venv /opt/gpumemlab-venv), or pass {flag} to "
            f"run them AS ROOT (every feedback file then says so)")


@dataclass
class StudentResult:
    student_id: str
    tests: list          # [{name, score, max_score, output, status, inside_only, answer}]
    score: float
    max_score: float
    seconds: float
    timestamp: str = ""
    notes: list = field(default_factory=list)
    isolated: bool = True
    penalty: float = 0.0             # late penalty in points (``late``); score stays the raw score
    late_text: str = ""              # one line on lateness for the feedback; "" when on time
    answers: dict = field(default_factory=dict)   # grade_id -> the student's text, cleaned

    @property
    def final_score(self) -> float:
        return max(self.score - self.penalty, 0.0)


@dataclass
class GradingRun:
    """What every submission of one assignment shares: the source's tests and the kit."""
    source_nb: object
    parts: dict
    kit: Path
    sandbox: bool
    deny_roots: list
    limits: dict
    judges: object = None            # judge_pool.JudgePool: answers judged in limited children
    variants: dict = field(default_factory=dict)   # variant question id -> template or None
    runs_as: str = "sandbox"         # without it: "nobody", "root" (setpriv failed) or "user"
    unprivileged_reason: str = ""    # why not "nobody" when the grader is root
    exposed: list = field(default_factory=list)   # [(path, "read"|"change")] any user reaches

    def not_isolated_note(self) -> str:
        """The first note of every feedback of an unsandboxed run, saying as whom it ran."""
        if self.runs_as == "nobody":
            return NOT_ISOLATED_NOBODY
        if self.runs_as == "root":
            return (f"NOT ISOLATED: this notebook ran without the OS sandbox (--no-sandbox) and "
                    f"AS ROOT, as the teacher allowed ({ALLOW_ROOT_FLAG}; it could not run as "
                    f"an unprivileged user: {self.unprivileged_reason}); its "
                    f"code could read and change anything on the machine")
        return NOT_ISOLATED

    def close(self):
        if self.judges is not None:
            self.judges.close()
        shutil.rmtree(self.kit, ignore_errors=True)


def open_run(source_nb, *, sandbox=True, deny_roots=(), limits=None, protect=None,
             allow_root=False) -> GradingRun:
    """Validate the source, check the sandbox, write the student kit. Without the sandbox, a
    root grader checks once that the executor can run as an unprivileged user (``unprivileged``)
    and which of ``protect`` (default: ``deny_roots``) such a user could read or change; where
    it cannot, RootRunsRefused before any submission runs, unless ``allow_root``."""
    from .cells import validate_source
    from .verdicts import check_questions, withheld_modules
    from .kit import prepare_kit

    validate_source(source_nb)
    parts = test_parts(source_nb)
    shown = variants.variant_templates(source_nb)   # id -> template, or None: a bank question
    judges = [j for _, js in parts.values() for j in js if shown.get(j.question) is None]
    check_questions(judges, "source notebook")
    if sandbox:
        reason = isolation.unavailable_reason()
        if reason:
            raise SandboxUnavailable(
                f"cannot isolate submissions: {reason}. Install Debian's bubblewrap (and allow "
                f"user namespaces), or pass --no-sandbox to grade without isolation (every "
                f"feedback file then says so)")
    kit = Path(tempfile.mkdtemp(prefix="gml-kit-"))
    prepare_kit(kit, withheld_modules(judges))
    runs_as, why, exposed = "sandbox", "", []
    if not sandbox:
        runs_as = "user"
        if isolation.running_as_root():
            unprivileged.site_view(kit)
            why, exposed = unprivileged.probe(kit, list(deny_roots if protect is None else protect)
                                              + unprivileged.installed_copies())
            runs_as = "root" if why else "nobody"
            if why and not allow_root:   # a student's code as root is the teacher's choice
                shutil.rmtree(kit, ignore_errors=True)
                raise RootRunsRefused(why)
    limits = dict(LIMITS, **(limits or {}))
    if runs_as in ("user", "root"):   # the process limit would count the grader's processes
        limits["processes"] = 0
    from .judge_pool import JudgePool

    return GradingRun(source_nb, parts, kit, sandbox, [str(d) for d in deny_roots], limits,
                      JudgePool(), shown, runs_as, why or "", exposed)


def read_notebook(path):
    import nbformat

    return nbformat.read(str(path), as_version=4)


def _scrub(text, paths, limit=500) -> str:
    """Text for a student: the grader's own paths replaced, cleaned, capped (``scrub``)."""
    from .scrub import scrub

    return scrub(text, paths, limit)


def grade_one(run: GradingRun, student_id, folder, notebook, *, cell_timeout=30, timeout=300,
              keep=None, variant_seed=None) -> StudentResult:
    """Grade one submission; never raises for anything the submission does. ``variant_seed``
    (``variants.student_seed``) stays with the judges, and never enters the sandbox."""
    started = time.monotonic()
    notes, student_nb, state, timestamp, answers = [], None, {}, "", {}
    base = Path(tempfile.mkdtemp(prefix="gml-grade-"))
    # an unprivileged run's folders on a tmpfs of their own where root may mount: what it
    # writes fills that, not the grader's disk (``isolation.space``)
    space = RunSpace(base, COPY_LIMIT_BYTES + RUN_DISK_BYTES) if run.runs_as == "nobody" \
        else None
    home, io = base / "submission", base / "grader"
    inside = run.sandbox
    from .scrub import grader_paths

    paths = grader_paths(run.kit, run.deny_roots, base, home, folder)
    rng = random.Random(secrets.randbits(64))
    from .verdicts import plan

    requests = {gid: [plan(j, rng, run.variants) for j in judges]
                for gid, (_, judges) in run.parts.items()}
    try:
        io.mkdir()
        if folder is not None:   # the time first: no copy limit may leave timestamp.txt out
            timestamp = read_timestamp(Path(folder))
            notes += copy_submission(Path(folder), home)
        else:
            home.mkdir()
        student_nb = _read_student(home, folder, notebook, notes, paths)
        answers = {gid: _scrub(text, paths, ANSWER_LIMIT)   # shown back in feedback.html
                   for gid, text in student_answers(run.source_nb, student_nb).items()}
        if student_nb is None:   # nothing to run: every test fails, no kernel needed
            raise _NothingToRun
        key, token = secrets.token_bytes(32), secrets.token_hex(8)
        in_home = isolation.INSIDE_HOME if inside else str(home)
        in_io = isolation.INSIDE_IO if inside else str(io)
        kit = isolation.INSIDE_KIT if inside else str(run.kit)
        graded = build_graded(run.source_nb, student_nb, home=in_home,
                              deny_roots=run.deny_roots + [in_io], key=key, token=token,
                              kit=kit, requests=requests)
        import nbformat

        nbformat.write(graded, str(io / "graded.ipynb"))
        from .kernel_guard import trusted_sys_path

        limits = dict(run.limits, cpu_s=run.limits["cpu_s"] or int(timeout) + 60)
        job = {"notebook": f"{in_io}/graded.ipynb", "workdir": in_home, "private": in_io,
               "result": f"{in_io}/result.json", "cell_timeout": cell_timeout,
               "runtime": "/tmp/jupyter-runtime" if inside else str(io / unprivileged.RUNTIME),
               # the sandbox has a network namespace of its own; outside it, TCP is shared
               "kernel_sockets": "tcp" if inside else "ipc",
               "seed": student_id, "pythonpath": trusted_sys_path(kit), "limits": limits,
               # the run's uid is its own (the sandbox's PID namespace, or an unprivileged uid):
               # a cell's clock counts every process of it (``runner.CellClock``)
               "cpu_by_uid": inside or run.runs_as == "nobody",
               "executed": f"{in_io}/executed.ipynb" if keep is not None else None}
        (io / "job.json").write_text(json.dumps(job), encoding="utf-8")
        for name in ("result.json",) + (("executed.ipynb",) if keep is not None else ()):
            (io / name).write_text("")
        if inside:
            isolation.give_to_sandbox(io)
        state = _run_worker(run, base, home, io, f"{in_io}/job.json", timeout, notes,
                            space=space)
    except _NothingToRun:
        state = {"finished": True}
    finally:
        if keep is not None:   # what the run left: folders, files and links, no FIFO
            shutil.copytree(base, Path(keep) / display_id(student_id), dirs_exist_ok=True,
                            symlinks=True, ignore=not_regular_entries)
        if space is not None:
            space.close()
        shutil.rmtree(base, ignore_errors=True)
    rows = _judge_rows(run, state, requests, student_id, paths, variant_seed)
    from .runner import MAX_RESTARTS

    events = state.get("events") if isinstance(state.get("events"), list) else []
    for ev in events[:MAX_RESTARTS + 2]:   # the executor records at most that many
        if isinstance(ev, dict) and ev.get("event") in ("timeout", "kernel died"):
            gid = ev.get("grade_id") if isinstance(ev.get("grade_id"), str) else ""
            role = ev.get("role") if ev.get("role") in ("answer", "test", "source", "student",
                                                        "startup") else "notebook"
            article = "an" if role[0] in "aeiou" else "a"
            notes.append(f"{article} {role} cell{' (' + gid[:80] + ')' if gid else ''} stopped: "
                         f"{ev['event']}; it was skipped and the rest re-run")
    if not inside:
        notes.insert(0, _scrub(run.not_isolated_note(), paths, 2000))   # setpriv's reason
    return StudentResult(student_id, rows, sum(r["score"] for r in rows),
                         sum(r["max_score"] for r in rows), time.monotonic() - started,
                         timestamp, notes, isolated=inside, answers=answers)


def _read_student(home, folder, notebook, notes, paths):
    if notebook is None:
        notes.append("no notebook found in the submission")
        return None
    from .submission import SubmissionError, read_submission

    copy = home / Path(notebook).relative_to(folder)
    try:
        return read_submission(copy)
    except SubmissionError as exc:   # grade as empty, say why
        notes.append(_scrub(f"could not read the notebook: {exc}", paths))
    except Exception as exc:   # a grader bug: the same, and the class goes on
        notes.append(_scrub(f"could not read the notebook: {type(exc).__name__}: {exc}",
                            paths))
    return None


def _judge_rows(run, state, requests, student_id, paths, variant_seed=None) -> list:
    from .answers import answer_text
    from .runner import ANSWERS_LIMIT, OUTPUT_LIMIT

    tests = state.get("tests") if isinstance(state.get("tests"), dict) else {}
    rows = []
    for gid, pts in tests_of(run.source_nb):
        _, judges = run.parts[gid]
        got = tests.get(gid)
        passed = isinstance(got, dict) and got.get("passed") is True
        if not isinstance(got, dict):
            output = "test cell did not run"
        elif not passed:
            output = str(got.get("output") or "the test's checks failed")[:OUTPUT_LIMIT]
        else:
            output = ""
        replies = None
        if passed and judges:
            replies = _decode(got.get("answers"), ANSWERS_LIMIT)
            if isinstance(replies, dict):   # the executor found the answers too large
                replies = [{"ok": False, "error": f"the answers are larger than "
                                                  f"{ANSWERS_LIMIT >> 10} KiB"}] * len(judges)
            for k, request in enumerate(requests[gid]):
                reply = replies[k] if isinstance(replies, list) and k < len(replies) else None
                request, seed = variants.judged_as(run.variants, request, student_id,
                                                   variant_seed)
                ok, message = run.judges.judge(request, reply, seed, who=student_id)
                if not ok:
                    passed, output = False, message
                    break
        rows.append({"name": gid, "score": pts if passed else 0.0, "max_score": pts,
                     "status": "passed" if passed else "failed",
                     "output": _scrub(output, paths, OUTPUT_LIMIT), "inside_only": not judges,
                     "answer": answer_text(requests[gid], replies)})
    return rows


def _unsure_time(late_text: str) -> bool:
    """A late note the teacher must see: a file time stood in, or a time was refused."""
    from .late import MTIME_NOTE

    return MTIME_NOTE in late_text or "the teacher decides" in late_text


def _shown(student_id) -> str:
    """A student id (a folder name: any bytes) safe to print on the teacher's terminal."""
    from gpumemlab.cleantext import clean_text

    return clean_text(display_id(student_id), limit=120, keep_newlines=False)


def grade_all(source_path, submissions, *, workers=2, cell_timeout=30, timeout=300,
              progress=sys.stderr, keep=None, sandbox=True, limits=None, late=None,
              assignment=None, secret=None, allow_root=False) -> list:
    """Grade every submission in parallel; returns StudentResults sorted by student id.
    ``late``: a ``late.LatePolicy`` whose penalty each result carries (None: no penalty);
    ``assignment``: read ``<student>/<assignment>/`` where a student has that folder, and
    derive variants from it with the course ``secret`` (``variants.seeds_for``);
    ``allow_root``: without the sandbox, a root grader that cannot run submissions as an
    unprivileged user runs them as root instead of raising RootRunsRefused."""
    source_path = Path(source_path)
    source_nb = read_notebook(source_path)
    seed_of = variants.seeds_for(source_nb, secret, assignment or source_path.stem)
    subs = find_submissions(Path(submissions), source_path.name, assignment)
    deny = [str(source_path.resolve().parent), str(Path(submissions).resolve())]
    run = open_run(source_nb, sandbox=sandbox, deny_roots=deny, limits=limits,
                   protect=deny + [str(source_path.resolve())], allow_root=allow_root)
    for line in unsandboxed_warnings(run):
        print(f"gpumemlab grade: {line}", file=sys.stderr)
    run.judges.prestart(min(max(1, workers), len(subs)))
    results, n = [], len(subs)
    max_score = sum(p for _, p in tests_of(source_nb))
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = {pool.submit(grade_one, run, sid, folder, nbp, cell_timeout=cell_timeout,
                                   timeout=timeout, keep=keep, variant_seed=seed_of(sid)): sid
                       for sid, folder, nbp in subs}
            notebooks = {sid: nbp for sid, _, nbp in subs}
            for done, fut in enumerate(as_completed(futures), 1):
                sid = futures[fut]
                try:
                    res = fut.result()
                except Exception as exc:  # a grader bug must not lose the other students
                    from gpumemlab.cleantext import clean_text

                    print(f"gpumemlab grade: grading {_shown(sid)} failed: "
                          f"{clean_text(f'{type(exc).__name__}: {exc}', limit=500)}",
                          file=sys.stderr)
                    res = StudentResult(sid, [], 0.0, max_score, 0.0, isolated=sandbox,
                                        notes=[f"grader error ({type(exc).__name__}); the "
                                               f"teacher's log has the details"])
                results.append(apply_late(res, late, notebooks[sid]))
                if late is not None and _unsure_time(res.late_text):
                    print(f"gpumemlab grade: {_shown(sid)}: {res.late_text}", file=sys.stderr)
                if progress is not None:
                    late_note = f" (late: -{res.penalty:g})" if res.penalty else ""
                    print(f"[{done}/{n}] {_shown(sid)}: {res.final_score:g}/{res.max_score:g}"
                          f"{late_note} in {res.seconds:.1f} s", file=progress, flush=True)
    finally:
        run.close()
    return sorted(results, key=lambda r: os.fsencode(r.student_id))

"""What ``run_autograder`` runs in a Gradescope container: grade one submission, write results.

Gradescope's layout (its autograder specification), under a root that is ``/autograder`` there
and ``$GPUMEMLAB_AUTOGRADER_ROOT`` when set (a test's fake tree)::

    source/                     the teacher's zip, unpacked: settings, teacher/<notebook>
    submission/                 the student's files
    submission_metadata.json    submission time, due dates, who submitted (``metadata``)
    results/results.json        what this writes (``results``)

One submission is graded the way ``gpumemlab grade`` grades each one (``grade.open_run`` and
``grade.grade_one``): rebuilt from the teacher's notebook, run in the bubblewrap sandbox when it
can run in this container, else (settings ``sandbox: auto``) without it, and then the results
say so at the top. Without it, as root, the notebook runs as an unprivileged uid of its own
(``unprivileged``) after ``lock_down`` took the teacher's files, the results and the metadata out
of other users' reach; where no unprivileged user can run it, it is not graded (score 0 and
the reason), unless the settings allow runs as root (``allow_root_runs``).
The late penalty comes from the settings' numbers and Gradescope's times. A source with
per-student variant questions is judged against the submitting student's own variant
(``identity``), or not graded when that student cannot be told.

Whatever happens (no submission, an unreadable notebook, broken settings, a grader bug) a
results.json is written: score 0 and the reason when nothing could be graded; the traceback
goes to stdout, which Gradescope shows the teacher only. The file is written to a temporary name
and renamed, so Gradescope never reads half of one.

``python -m gpumemlab.classroom.gradescope.run --check`` (run by setup.sh while the image is
built) reads the settings and the notebook and says whether the sandbox works there, and where
it does not, whether a notebook can run as an unprivileged user (it fails when none would be
graded).
"""
from __future__ import annotations

import json
import os
import stat
import sys
import time
import traceback
from pathlib import Path

from .config import CONFIG_NAME, SECRET_PATH, TEACHER_DIR, ConfigError, \
    read_config
from ..atomic import write_files   # imported before any submission runs
from .results import NOT_YOUR_FAULT

ROOT_ENV = "GPUMEMLAB_AUTOGRADER_ROOT"
DEFAULT_ROOT = "/autograder"
STUDENT_ID = "submission"


class _Refused(Exception):
    """Nothing can be graded; the message is the student's explanation."""


def autograder_root() -> Path:
    return Path(os.environ.get(ROOT_ENV) or DEFAULT_ROOT)


def _settings(root: Path):
    """(config, source notebook), or _Refused."""
    from ..cells import NotebookFormatError, validate_source
    from ..grade import read_notebook
    from ..variants import bank_judges, variant_questions

    try:
        config = read_config(root / "source" / CONFIG_NAME)
    except (ConfigError, OSError) as exc:
        raise _Refused(f"The autograder is misconfigured: {exc}. {NOT_YOUR_FAULT}") from None
    path = root / "source" / TEACHER_DIR / config["notebook"]
    try:
        source_nb = read_notebook(path)
        validate_source(source_nb)
        bank_judges(source_nb)
        shown = variant_questions(source_nb)
    except (NotebookFormatError, OSError, ValueError) as exc:
        raise _Refused(f"The autograder's notebook {config['notebook']} cannot be used: "
                       f"{exc}. {NOT_YOUR_FAULT}") from None
    if shown and config.get("variants") is None:   # judged_as would fail on every submission
        raise _Refused(f"The autograder is misconfigured: its notebook has per-student variant "
                       f"questions ({', '.join(shown)}) but no course secret (gpumemlab "
                       f"gradescope --secret). {NOT_YOUR_FAULT}")
    return config, source_nb


def _times(root: Path, config):
    """(SubmissionTimes or None, note): read before any of the submission's code runs."""
    from .metadata import METADATA_NAME, MetadataError, read_times

    if config.get("late") is None:
        return None, ""
    try:
        return read_times(root / METADATA_NAME), ""
    except MetadataError as exc:
        if not config["late"]["per_day"]:   # lateness is only reported: nothing is lost
            return None, f"lateness not checked: {exc}"
        return None, (f"late policy NOT applied: {exc}; your teacher will check the submission "
                      f"time")


def _sandbox(config):
    """(use the sandbox?, why not: None for ``sandbox: off``, else the reason; "" with it)."""
    from .. import isolation

    if config["sandbox"] == "off":
        return False, None
    reason = isolation.unavailable_reason()
    if reason is None:
        return True, ""
    if config["sandbox"] == "require":
        raise _Refused(f"Not graded: this autograder requires the OS sandbox (bubblewrap), "
                       f"which cannot run in this container ({reason}). {NOT_YOUR_FAULT}")
    return False, reason


def lock_down(root: Path) -> None:
    """The teacher's files, the results and Gradescope's metadata (earlier results too) out of
    reach of other users, so that a notebook run as an unprivileged user without the sandbox cannot read or
    change them; run before any of the submission's code."""
    from .metadata import METADATA_NAME

    (root / "results").mkdir(mode=0o700, exist_ok=True)
    for path, mode in ((root / "source", 0o700), (root / "results", 0o700),
                       (root / METADATA_NAME, 0o600)):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
            os.chmod(path, mode)


def _submission(root: Path, config):
    """(folder or None, notebook path or None, notes)."""
    from ..intake import find_notebook

    folder = root / "submission"
    try:
        st = os.lstat(folder)
    except OSError:
        return None, None, ["no submission folder was found"]
    if not stat.S_ISDIR(st.st_mode):
        return None, None, ["the submission is not a folder"]
    notebook = find_notebook(folder, config["notebook"])
    if notebook is None:
        return folder, None, [f"expected the notebook {config['notebook']} (or a single "
                              f".ipynb file) in the submission"]
    return folder, notebook, []


def grade_submission(root: Path, started: float) -> dict:
    """The results for the submission under ``root`` (raises only for grader bugs)."""
    from ..grade import ALLOW_ROOT_FLAG, RootRunsRefused, grade_one, open_run, \
        unsandboxed_warnings
    from .metadata import METADATA_NAME
    from .results import results
    from .identity import NotIdentified, variant_seed
    from ..late import LatePolicy, late_penalty

    from .results import not_isolated_banner

    config, source_nb = _settings(root)
    times, late_note = _times(root, config)
    try:   # like the times: read before any of the submission's code runs
        seed = variant_seed(root / "source" / SECRET_PATH, root / METADATA_NAME, config)
    except NotIdentified as exc:
        raise _Refused(str(exc)) from None
    sandbox, why_not = _sandbox(config)
    folder, notebook, notes = _submission(root, config)
    limits = {"memory_bytes": int(config["memory_mb"]) << 20} if config["memory_mb"] else None
    lock_down(root)
    protect = [str(root.resolve() / p) for p in ("source", "results", METADATA_NAME)]
    try:
        run = open_run(source_nb, sandbox=sandbox, deny_roots=[str(root.resolve())],
                       limits=limits, protect=protect,
                       allow_root=config.get("allow_root_runs", False))
    except RootRunsRefused as exc:   # before any of the submission's code ran
        without = ("this autograder is set to run without the OS sandbox (sandbox: off)"
                   if why_not is None else
                   f"the OS sandbox cannot run in this container ({why_not})")
        raise _Refused(f"Not graded: {without} "
                       f"and the notebook cannot run as an unprivileged user ({exc.reason}); "
                       f"it is not run as root unless the autograder allows it (gpumemlab "
                       f"gradescope {ALLOW_ROOT_FLAG}), or the kit is installed where any user "
                       f"can start it. {NOT_YOUR_FAULT}") from None
    banner = "" if sandbox else not_isolated_banner(why_not, run.runs_as,
                                                    run.unprivileged_reason)
    for line in unsandboxed_warnings(run):
        print(f"gpumemlab autograder: {line}")
    try:
        result = grade_one(run, STUDENT_ID, folder, notebook,
                           cell_timeout=config["cell_timeout"], timeout=config["timeout"],
                           variant_seed=seed)
    finally:
        run.close()
    result.seconds = time.monotonic() - started
    late = config.get("late")
    if late is not None and times is not None:
        if times.due is None:
            late_note = "the assignment has no due date on Gradescope: no late penalty"
        else:
            policy = LatePolicy(times.due, late["per_day"], late["cap"], late["grace_s"])
            lateness = late_penalty(policy, times.submitted, result.score, result.max_score)
            result.penalty, result.late_text = lateness.penalty, lateness.text
            if times.extended and lateness.text:
                result.late_text += " (your own due date)"
    return results(result, config["visibility"], banner=banner,
                   notes=notes + ([late_note] if late_note else []))


def write_results(path: Path, data: dict) -> None:
    """Atomically (a temporary name renamed), into a real folder, and read back to check:
    the folder a link or something else is replaced by a 0700 folder first."""
    text = json.dumps(data, indent=1, ensure_ascii=False)
    folder = Path(path).parent
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(folder)
    except FileNotFoundError:
        pass
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:   # left there as a folder, a link or a FIFO: not ours, replaced
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            import shutil

            shutil.rmtree(path)
        elif not stat.S_ISREG(st.st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
    for _ in range(3):
        write_files({path: text})
        if _read_back(path) == text:
            return
    print(f"gpumemlab autograder: {path} did not read back as written")


def _read_back(path: Path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read().decode("utf-8", "replace") if stat.S_ISREG(os.fstat(fd).st_mode) \
            else None


def run(root: Path) -> dict:
    """Grade and write ``results/results.json``; never raises. -> the results written.
    Every process started below the grader (a daemon a notebook run as root left, however
    it detached) is ended first (``isolation.descendants``)."""
    from ..isolation.descendants import become_subreaper, end_descendants
    from .results import failure

    become_subreaper()   # before any of the submission's code: its orphans stay below us
    started = time.monotonic()
    try:
        data = grade_submission(root, started)
    except _Refused as exc:
        data = failure(str(exc), time.monotonic() - started)
    except Exception as exc:   # a grader bug: the student still gets a results file
        traceback.print_exc(file=sys.stdout)
        data = failure(f"The autograder failed while grading ({type(exc).__name__}). "
                       f"{NOT_YOUR_FAULT}", time.monotonic() - started)
    left = end_descendants()   # nothing of the submission may write the results after us
    if left:
        print(f"gpumemlab autograder: ended {left} process(es) the submission left running")
    write_results(root / "results" / "results.json", data)
    return data


def check(root: Path) -> int:
    """setup.sh's check while the image is built: settings, notebook, sandbox."""
    from .. import isolation

    try:
        config, source_nb = _settings(root)
    except _Refused as exc:
        print(f"gpumemlab autograder: {exc}")
        return 1
    from ..variants import VariantError, read_secret

    reason = isolation.unavailable_reason()
    print(f"gpumemlab autograder: {config['assignment']} ({config['notebook']}); settings read")
    if config.get("variants") is not None:
        try:
            read_secret(root / "source" / SECRET_PATH, private=False)
        except VariantError as exc:
            print(f"gpumemlab autograder: {exc}")
            return 1
        print(f"gpumemlab autograder: per-student variants for "
              f"{len(config['variants']['roster'])} roster ids, matched by Gradescope's "
              f"users[].{config['variants']['student_key']}; course secret read")
    print("gpumemlab autograder: sandbox: " + ("bubblewrap works here" if reason is None else
                                                f"UNAVAILABLE here ({reason}); mode "
                                                f"{config['sandbox']}"))
    if reason is not None and config["sandbox"] != "require" and isolation.running_as_root():
        return _check_unprivileged(config, source_nb)
    return 0


def _check_unprivileged(config, source_nb) -> int:
    """Without the sandbox: can a notebook run as an unprivileged user here (the run's own
    check, ``grade.open_run``)? If not, and root runs are not allowed, no submission would be
    graded: 1, so the image build stops and says why."""
    from ..grade import ALLOW_ROOT_FLAG, RootRunsRefused, open_run

    allow = config.get("allow_root_runs", False)
    try:
        run = open_run(source_nb, sandbox=False, allow_root=allow)
    except RootRunsRefused as exc:
        print(f"gpumemlab autograder: without the sandbox, notebooks CANNOT run as an "
              f"unprivileged user here ({exc.reason}), so none would be graded: install the kit "
              f"where any user can start it, or pack with gpumemlab gradescope {ALLOW_ROOT_FLAG}")
        return 1
    try:
        print("gpumemlab autograder: without the sandbox, notebooks run " +
              (f"AS ROOT ({ALLOW_ROOT_FLAG}; no unprivileged user can run them here: "
               f"{run.unprivileged_reason})" if run.runs_as == "root" else
               "as an unprivileged user of their own"))
    finally:
        run.close()
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = autograder_root()
    if argv == ["--check"]:
        return check(root)
    data = run(root)
    print(f"gpumemlab autograder: score {data['score']:g}; "
          f"{len(data['tests'])} tests; results in {root / 'results' / 'results.json'}")
    print(data["output"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

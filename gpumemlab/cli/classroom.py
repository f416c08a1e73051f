"""``gpumemlab assign`` and ``gpumemlab grade``: the classroom commands (nbgrader conventions).

    gpumemlab assign SOURCE.ipynb OUT/           # student version, checked by the grader
    gpumemlab assign SOURCE.ipynb OUT/ --roster roster.csv --secret course.secret
                                                 # per-student variants: OUT/<student>/
    gpumemlab grade SUBMISSIONS --source SOURCE.ipynb --out grades.csv   # + items.csv beside
    gpumemlab grade ... --secret course.secret   # judges each student's own variants
    gpumemlab certificate keygen|issue|verify    # signed certificates (cli/certificate.py)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from . import certificate as certificate_cli
from .progress import LineSink, add_quiet, ticker


def register(subparsers) -> None:
    a = subparsers.add_parser("assign", help="make the student version of a source notebook",
                              description="Replace solutions by stubs, drop hidden tests, lock "
                              "the other cells; then check the source passes and the student "
                              "version fails every test.")
    a.add_argument("source", type=Path, help="instructor notebook (nbgrader markup)")
    a.add_argument("out", type=Path, help="output folder, or a .ipynb path")
    a.add_argument("--no-check", action="store_true", help="skip running both versions")
    a.add_argument("--cell-timeout", type=float, default=60, help="seconds per cell (60)")
    a.add_argument("--roster", type=Path, default=None,
                   help="CSV with an id column: one version per student (variant sources)")
    a.add_argument("--secret", type=Path, default=None,
                   help="course secret file (created, mode 0600, when missing); grade with "
                        "the same file")
    a.add_argument("--assignment", default=None, help="assignment name the variants are "
                   "derived from (default: notebook name; grade must use the same)")
    add_quiet(a)
    a.set_defaults(func=_assign)

    g = subparsers.add_parser("grade", help="grade a folder of submissions",
                              description="Run every SUBMISSIONS/<student>/.../NOTEBOOK in its "
                              "own sandboxed kernel with the source's tests and hidden tests.")
    g.add_argument("submissions", type=Path, help="folder with one sub-folder per student")
    g.add_argument("--source", type=Path, required=True, help="instructor notebook")
    g.add_argument("--out", type=Path, default=Path("grades.csv"), help="grades CSV path")
    g.add_argument("--feedback", type=Path, default=None,
                   help="folder for per-student results.json, feedback.txt and "
                        "feedback.html (default: feedback/ beside the CSV)")
    g.add_argument("--assignment", default=None, help="assignment name (default: notebook "
                   "name); where SUBMISSIONS/<student>/<assignment>/ exists (nbgrader's "
                   "layout), only that folder is graded")
    g.add_argument("--duedate", default=None,
                   help="due date, ISO 8601 (2026-12-01T17:00+01:00; a date alone is the end "
                        "of that day, a time without a zone is UTC); default: the source's "
                        "metadata.gpumemlab.late.due")
    add_late_options(g, "the due date")
    g.add_argument("--roster", type=Path, default=None,
                   help="CSV with id,first_name,last_name,email")
    g.add_argument("--secret", type=Path, default=None,
                   help="course secret file assign used (needed for variant questions)")
    g.add_argument("--cell-timeout", type=float, default=30, help="seconds per cell (30)")
    g.add_argument("--timeout", type=float, default=300, help="seconds per notebook (300)")
    g.add_argument("--workers", type=int, default=2, help="kernels run at once (2)")
    g.add_argument("--no-sandbox", action="store_true",
                   help="run submissions without the OS sandbox (bubblewrap); every feedback "
                        "file then says the run was not isolated")
    g.add_argument("--allow-root-runs", action="store_true",
                   help="with --no-sandbox as root: where submissions cannot run as an "
                        "unprivileged user of their own (setpriv missing, or the kit's "
                        "interpreter unreadable to other users, e.g. under /root), run them AS "
                        "ROOT instead of stopping with the reason; every feedback file says so")
    g.add_argument("--memory-mb", type=int, default=None,
                   help="address-space limit per sandboxed process in MiB (8192)")
    g.add_argument("--keep", type=Path, default=None,
                   help="keep each run's folder in KEEP/<student> (its copy as the run left "
                        "it, the executed notebook, the worker's log) to look into a run")
    g.add_argument("--certificates-key", type=Path, default=None,
                   help="after grading, sign certificates with this private key (PEM)")
    g.add_argument("--course", default=None, help="course name for --certificates-key")
    g.add_argument("--certificates", type=Path, default=None,
                   help="certificates folder (default: certificates/ beside the CSV)")
    certificate_cli.add_issue_options(g)
    g.add_argument("--json", action="store_true",
                   help="print each student's scores as JSON (the files are written all the "
                        "same; what grade says besides goes to stderr)")
    add_quiet(g)
    g.set_defaults(func=_grade)

    certificate_cli.add_parser(subparsers, _certificate)


def add_late_options(p, due: str) -> None:
    """The late policy's numbers (``classroom.late``), for ``grade`` and ``gradescope``."""
    p.add_argument("--late-per-day", default=None, metavar="FRACTION",
                   help=f"late penalty per started day past {due}: 0.1 or 10%% of the maximum "
                        f"score (default: the source's metadata.gpumemlab.late, else 0: "
                        f"lateness is reported, not penalised)")
    p.add_argument("--late-cap", default=None, metavar="FRACTION",
                   help="largest late penalty, a fraction of the maximum score (default 100%%)")
    p.add_argument("--grace", default=None, metavar="DURATION",
                   help="submissions this long after the due date count as on time: 15m, 2h, "
                        "1d (default 0)")


def _error(msg):
    from . import CLIError

    return CLIError(msg)


def _assign(args) -> int:
    from gpumemlab.classroom.assign import assign
    from gpumemlab.classroom.cells import NotebookFormatError

    if not args.source.is_file():
        raise _error(f"source notebook {args.source} does not exist")
    try:
        roster, secret = _variant_inputs(args)
        what = "checking the source and the student version" if not args.no_check else "writing"
        with ticker(args, f"assign: {what}"):
            report = assign(args.source, args.out, check=not args.no_check,
                            cell_timeout=args.cell_timeout, roster=roster, secret=secret,
                            assignment=args.assignment)
    except (NotebookFormatError, ValueError) as exc:
        raise _error(f"{args.source}: {exc}") from None
    print(report.text())
    return 0 if report.ok else 1


def _variant_inputs(args):
    """-> (roster, secret) for assign, every input checked before the secret is created. A
    source without variant cells makes one version for everyone: --roster or --secret with it
    is a one-line error (it would write no per-student notebook and no secret)."""
    import nbformat

    from gpumemlab.classroom.assign import check_variant_out
    from gpumemlab.classroom.reports import read_roster
    from gpumemlab.classroom.variants import VariantError, load_or_create, variant_questions

    try:
        nb = nbformat.read(str(args.source), as_version=4)
    except Exception as exc:
        raise ValueError(f"not a readable notebook ({type(exc).__name__})") from None
    questions = variant_questions(nb)
    if not questions:
        if args.roster is not None or args.secret is not None:
            given = " and ".join(o for o, v in (("--roster", args.roster),
                                                ("--secret", args.secret)) if v is not None)
            raise VariantError(f"{given}: this source has no per-student variant questions (no "
                               f"markdown cell with metadata.gpumemlab.variant), so every student "
                               f"gets the same notebook: assign without {given}, or start from "
                               f"the variant example, gpumemlab course example DIR")
        return None, None
    roster = read_roster(args.roster)
    if args.roster is None or args.secret is None:
        raise VariantError(f"the source has per-student variant questions "
                           f"({', '.join(questions)}): give --roster CSV and --secret FILE")
    if not roster:
        raise VariantError(f"roster {args.roster} lists no students")
    check_variant_out(args.out)
    secret, created = load_or_create(args.secret)
    if created:
        print(f"created the course secret {args.secret} (mode 0600): keep it private, and "
              f"grade with the same file (gpumemlab grade ... --secret {args.secret})")
    return roster, secret


def _grade(args) -> int:
    from gpumemlab.classroom.cells import NotebookFormatError
    from gpumemlab.classroom.grade import RootRunsRefused, SandboxUnavailable, grade_all
    from gpumemlab.classroom.reports import read_roster, write_csv, write_feedback
    from gpumemlab.classroom.variants import VariantError, read_secret

    if not args.source.is_file():
        raise _error(f"source notebook {args.source} does not exist")
    if not args.submissions.is_dir():
        raise _error(f"submissions folder {args.submissions} does not exist")
    if args.workers < 1 or args.cell_timeout <= 0 or args.timeout <= 0:
        raise _error("--workers, --cell-timeout and --timeout must be positive")
    if args.allow_root_runs and not args.no_sandbox:
        raise _error("--allow-root-runs goes with --no-sandbox: in the sandbox submissions "
                     "never run as root")
    if args.certificates_key is not None:
        if not args.course:
            raise _error("--certificates-key needs --course")
        _certificate_checks(args)
    try:
        roster = read_roster(args.roster)
        secret = None if args.secret is None else read_secret(args.secret)
    except (OSError, ValueError) as exc:
        raise _error(str(exc)) from None
    if args.out.name == "items.csv":
        raise _error("--out may not be named items.csv: the per-question results go there")
    policy = _late_policy(args)
    if args.no_sandbox and os.geteuid() == 0:   # submissions then run as uids of their own
        from gpumemlab.classroom.isolation.unprivileged import close_folders

        feedback = args.feedback or args.out.parent / "feedback"
        for line in close_folders([args.out.parent.resolve(), feedback.resolve()]):
            print(f"gpumemlab grade: {line}", file=sys.stderr)
    try:
        limits = {"memory_bytes": args.memory_mb << 20} if args.memory_mb else None
        with ticker(args, "grade") as tick:
            results = grade_all(args.source, args.submissions, workers=args.workers,
                                cell_timeout=args.cell_timeout, timeout=args.timeout,
                                progress=LineSink(tick, "graded") if tick.on else None,
                                sandbox=not args.no_sandbox, limits=limits, late=policy,
                                assignment=args.assignment, secret=secret,
                                allow_root=args.allow_root_runs, keep=args.keep)
    except (NotebookFormatError, VariantError) as exc:
        raise _error(f"{args.source}: {exc}") from None
    except (SandboxUnavailable, RootRunsRefused) as exc:
        raise _error(str(exc)) from None
    assignment = args.assignment or args.source.stem
    from gpumemlab.classroom.late import format_time

    say = sys.stderr if args.json else sys.stdout    # --json: stdout is the JSON alone
    write_csv(results, args.out, assignment=assignment,
              duedate=format_time(policy.due) if policy else "", roster=roster)
    _write_items(results, args.out, assignment, say)
    feedback = args.feedback or args.out.parent / "feedback"
    failed = write_feedback(results, feedback, assignment=assignment)
    print(f"graded {len(results)} submissions: {args.out}, feedback in {feedback}", file=say)
    if failed:   # the others' feedback and certificates go on regardless
        from gpumemlab.classroom.intake import display_id
        from gpumemlab.cleantext import clean_text

        print(f"feedback could not be written for {len(failed)} student"
              f"{'s' * (len(failed) != 1)}:", file=sys.stderr)
        for sid, why in failed:
            print(f"  {clean_text(display_id(sid), keep_newlines=False)}: {why}",
                  file=sys.stderr)
    if args.certificates_key is not None:
        out = args.certificates or args.out.parent / "certificates"
        import contextlib

        with contextlib.redirect_stdout(say):
            rows = _certificate(args, lambda: certificate_cli.issue_grades(
                args, args.out, args.course, args.certificates_key, out, assignment))
        n = sum(r["issued"] == "yes" for r in rows)
        print(f"issued {n} certificate{'s' * (n != 1)} in {out}", file=say)
    if args.json:
        import json

        print(json.dumps(_grades_json(results, assignment, args.out, feedback), indent=1))
    return 0


def _grades_json(results, assignment, out, feedback) -> dict:
    """Each student's scores and tests (no output: that is in their feedback files)."""
    from gpumemlab.classroom.intake import display_id

    keys = ("name", "score", "max_score", "status")
    return {"assignment": assignment, "grades": str(out), "items": str(out.with_name("items.csv")),
            "feedback": str(feedback),
            "students": [{"student_id": display_id(r.student_id), "score": r.score,
                          "late_penalty": r.penalty, "final_score": r.final_score,
                          "max_score": r.max_score, "timestamp": r.timestamp,
                          "isolated": r.isolated, "notes": list(r.notes),
                          "tests": [{k: t.get(k) for k in keys} for t in r.tests]}
                         for r in results]}


def _late_policy(args):
    """The late policy from the source's metadata, overridden by the command line; checked
    before anything is graded."""
    from gpumemlab.classroom.late import policy_from_args, policy_from_metadata

    try:
        import nbformat

        meta = nbformat.read(str(args.source), as_version=4).metadata
        late = policy_from_metadata(meta)
    except ValueError as exc:
        raise _error(f"{args.source}: {exc}") from None
    except Exception:   # the grading run reports an unreadable source in its own words
        late = {}
    given = {"due": args.duedate, "per_day": args.late_per_day, "cap": args.late_cap,
             "grace": args.grace}
    late.update({k: v for k, v in given.items() if v is not None})
    try:
        policy = policy_from_args(**late)
    except ValueError as exc:
        raise _error(str(exc)) from None
    if policy is not None:
        print(f"late policy: {policy.describe()}", file=sys.stderr)
    return policy


def _write_items(results, out, assignment, say):
    """items.csv beside the grades: each student's score and answer per question."""
    from gpumemlab.classroom.stats.items import write_items

    path = out.with_name("items.csv")
    write_items(results, path, assignment=assignment)
    print(f"per-question results (for gpumemlab stats): {path}", file=say)


def _certificate_checks(args):
    """Fail before grading, not after, on a bad key or threshold."""
    from gpumemlab.certificates.record import load_private_key
    from gpumemlab.certificates.issue import check_threshold

    _certificate(args, lambda: (load_private_key(args.certificates_key),
                                check_threshold(args.threshold)))


def _certificate(args, call=None):
    from gpumemlab.certificates.keys import CertificateError

    try:
        return call() if call else certificate_cli.run(args)
    except CertificateError as exc:
        raise _error(str(exc)) from None

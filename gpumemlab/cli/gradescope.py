"""``gpumemlab gradescope``: pack a source notebook into a Gradescope autograder zip.

    gpumemlab gradescope SOURCE.ipynb OUT.zip [--late-per-day 10%] [--visibility ID=hidden]
    gpumemlab gradescope SOURCE.ipynb OUT.zip --secret course.secret --roster roster.csv \
        [--student-key email|sid|id]     # a source with per-student variant questions

The zip's layout and what runs in the container: ``gpumemlab.classroom.gradescope.pack`` and
``gpumemlab.classroom.gradescope.run``; the teacher's guide: docs/QUIZZES.md.
"""
from __future__ import annotations

from pathlib import Path

from .classroom import add_late_options


def register(subparsers) -> None:
    from gpumemlab.classroom.gradescope.config import SANDBOX_MODES, STUDENT_KEYS, VISIBILITIES

    p = subparsers.add_parser(
        "gradescope", help="make a Gradescope autograder zip from a source notebook",
        description="Write OUT.zip for Gradescope's programming assignments: setup.sh (installs "
        "bubblewrap, a CPU torch and this kit, built from this checkout), run_autograder "
        "(grades /autograder/submission with the source's tests and hidden tests), the source "
        "notebook and the settings. The due date is the one set on Gradescope.")
    p.add_argument("source", type=Path, help="instructor notebook (nbgrader markup)")
    p.add_argument("out", type=Path, help="the zip to write")
    p.add_argument("--assignment", default=None, help="assignment name (default: notebook name)")
    p.add_argument("--cell-timeout", type=float, default=30, help="seconds per cell (30)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds per notebook (300; keep it under Gradescope's own limit)")
    p.add_argument("--memory-mb", type=int, default=None,
                   help="address-space limit per sandboxed process in MiB (8192)")
    add_late_options(p, "Gradescope's due date")
    p.add_argument("--visibility", action="append", default=[], metavar="GRADE_ID=VISIBILITY",
                   help=f"who sees a test's result on Gradescope: {', '.join(VISIBILITIES)} "
                        f"(default: the test cell's metadata.gpumemlab.visibility, else "
                        f"visible); repeat for several tests")
    p.add_argument("--sandbox", choices=SANDBOX_MODES, default="auto",
                   help="auto: use bubblewrap when it runs in the container, else grade without "
                        "it and say so in every result; require: score 0 with the reason when "
                        "it cannot run; off: never (auto)")
    p.add_argument("--allow-root-runs", action="store_true",
                   help="without the sandbox, where a notebook cannot run as an unprivileged "
                        "user of its own, run it AS ROOT (the results say so) instead of "
                        "scoring 0 with the reason")
    p.add_argument("--dist", type=Path, default=None,
                   help="a gpumemlab wheel or sdist to put in the zip (default: build a wheel "
                        "of this checkout)")
    p.add_argument("--secret", type=Path, default=None,
                   help="the course secret gpumemlab assign used (a source with per-student "
                        "variant questions only): it goes into the zip, which is then for the "
                        "teacher and Gradescope alone")
    p.add_argument("--roster", type=Path, default=None,
                   help="the roster CSV gpumemlab assign --roster used (with --secret): a "
                        "student whose id it does not list is told so, not graded")
    p.add_argument("--student-key", choices=STUDENT_KEYS, default=None,
                   help="the field of Gradescope's submission metadata (users[]) that holds "
                        "the roster's ids (with --secret; default email)")
    p.set_defaults(func=_gradescope)


def _gradescope(args) -> int:
    from gpumemlab.classroom.gradescope.pack import PackError, pack

    from . import CLIError

    if not args.source.is_file():
        raise CLIError(f"source notebook {args.source} does not exist")
    if args.out.suffix != ".zip":
        raise CLIError(f"{args.out}: the autograder must be a .zip file")
    late = {"per_day": args.late_per_day, "cap": args.late_cap, "grace": args.grace}
    try:
        report = pack(args.source, args.out, assignment=args.assignment,
                      cell_timeout=args.cell_timeout, timeout=args.timeout,
                      memory_mb=args.memory_mb, sandbox=args.sandbox, late=late,
                      visibility=args.visibility, dist=args.dist, secret=args.secret,
                      roster=args.roster, student_key=args.student_key,
                      allow_root_runs=args.allow_root_runs)
    except PackError as exc:
        raise CLIError(str(exc)) from None
    print(report.text())
    return 0

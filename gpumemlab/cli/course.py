"""``gpumemlab course``: setting the kit up for a course (docs/COURSE.md).

    gpumemlab course link --hub URL --repo GIT_URL [--branch B] [--lesson NN ...] [--app lab|notebook]

prints one nbgitpuller link per lesson notebook (``gpumemlab/classroom/links.py``): a student who
opens it on the course's JupyterHub gets the repository cloned (or updated) and the lesson open.

    gpumemlab course example DIR

writes the example assignment (``gpumemlab/classroom/example/``, built by
``scripts/build_example_assignment.py``) into DIR: a source notebook with graded per-student
variant questions and a three-student roster, ready for docs/COURSE.md's first step.
"""
from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    c = subparsers.add_parser("course", help="set the kit up for a course (nbgitpuller links)",
                              description="Course set-up. `gpumemlab course link` prints an "
                              "nbgitpuller link per lesson for a JupyterHub (docs/COURSE.md).")
    sub = c.add_subparsers(dest="course_command", metavar="SUBCOMMAND")
    c.set_defaults(func=lambda args: _usage(c))

    link = sub.add_parser(
        "link", help="print one nbgitpuller link per lesson notebook",
        description="Print one nbgitpuller link per lesson notebook (notebooks/NN_topic.ipynb): "
        "opening it on the hub clones or updates GIT_URL in the student's home and opens the "
        "lesson. The hub needs nbgitpuller installed.")
    link.add_argument("--hub", required=True, metavar="URL",
                      help="the JupyterHub's address, e.g. https://hub.example.edu")
    link.add_argument("--repo", required=True, metavar="GIT_URL",
                      help="the course's git repository (http or https), as students clone it")
    link.add_argument("--branch", default="main", help="branch to pull (main)")
    link.add_argument("--lesson", action="extend", nargs="+", default=[], metavar="NN",
                      help="only these lessons (numbers like 03, or notebook names); "
                           "default: every lesson")
    link.add_argument("--app", choices=("lab", "notebook"), default="lab",
                      help="open the lesson in JupyterLab (lab, the default) or the Notebook")
    link.add_argument("--target-path", default=None, metavar="DIR",
                      help="folder in the student's home to clone into (default: the last part "
                           "of GIT_URL, as nbgitpuller picks it)")
    link.add_argument("--notebooks", type=Path, default=None, metavar="DIR",
                      help="folder holding the lesson notebooks (default: notebooks/ of this "
                           "checkout, else of the current folder)")
    link.set_defaults(func=_link)

    ex = sub.add_parser(
        "example", help="write an example assignment (variant questions) and a roster",
        description="Write the example source assignment (nbgrader markup, one shared question "
        "and two per-student variant questions, all graded) and a three-student roster into "
        "DIR, then print the commands that assign and grade it (docs/COURSE.md).")
    ex.add_argument("dir", type=Path, help="folder to write into (made if missing)")
    ex.set_defaults(func=_example)


def _usage(parser) -> int:
    parser.print_help()
    return 2


def _link(args) -> int:
    from gpumemlab.classroom.links import LinkError, lesson_links

    from . import CLIError

    try:
        links = lesson_links(args.hub, args.repo, lessons=args.lesson, branch=args.branch,
                             app=args.app, target_path=args.target_path,
                             notebooks=args.notebooks)
    except LinkError as exc:
        raise CLIError(str(exc)) from None
    for item in links:
        print(f"{item.notebook}  {item.url}")
    return 0


EXAMPLE = Path(__file__).resolve().parents[1] / "classroom" / "example"
EXAMPLE_FILES = ("fragmentation_lab.ipynb", "roster.csv")


def _example(args) -> int:
    import shlex

    from . import CLIError

    taken = [n for n in EXAMPLE_FILES if (args.dir / n).exists()]
    if taken:
        raise CLIError(f"{args.dir / taken[0]} exists: choose an empty folder (nothing written)")
    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        for name in EXAMPLE_FILES:
            (args.dir / name).write_bytes((EXAMPLE / name).read_bytes())
    except OSError as exc:
        raise CLIError(f"cannot write {args.dir}: {exc.strerror or exc}") from None
    d = shlex.quote(str(args.dir))
    print(f"wrote {args.dir / EXAMPLE_FILES[0]} (the source: solutions, hidden tests, two "
          f"per-student variant questions) and {args.dir / EXAMPLE_FILES[1]}")
    print(f"next (docs/COURSE.md): cd {d} && gpumemlab assign fragmentation_lab.ipynb release/ "
          f"--roster roster.csv --secret course.secret")
    return 0

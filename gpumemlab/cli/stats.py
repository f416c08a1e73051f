"""``gpumemlab stats``: item statistics of a graded class (which question was too hard, which did
not separate the students who understood from those who did not).

    gpumemlab stats grades.csv                    # + items.csv beside it when there is one
    gpumemlab stats grades.csv --items items.csv --out report/

With an ``items.csv`` (written by ``gpumemlab grade``) the items are the questions; with
``grades.csv`` alone they are the assignments in it, joined on student_id. Writes
``DIR/stats.csv`` and ``DIR/stats.html`` (both, or neither) and prints the table and warnings
(``--json``: the figures as JSON).
The figures are ``classroom.item_stats``'s; the files ``classroom.stats_view``'s.
"""
from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    s = subparsers.add_parser("stats", help="item statistics of a graded class",
                              description="Per question (or per assignment): the share right, "
                              "the correlation with the rest of the score, the most common "
                              "wrong answers, and warnings for questions to look at.")
    s.add_argument("grades", type=Path, help="grades.csv from gpumemlab grade (nbgrader's "
                   "export columns)")
    s.add_argument("--items", type=Path, default=None,
                   help="items.csv from gpumemlab grade (default: items.csv beside the grades, "
                        "if there is one; without it the items are the assignments)")
    s.add_argument("--out", type=Path, default=None,
                   help="folder for stats.csv and stats.html (default: beside the grades)")
    s.add_argument("--json", action="store_true",
                   help="print the figures as JSON (the files are written all the same)")
    s.set_defaults(func=_stats)


def _stats(args) -> int:
    from gpumemlab.classroom.atomic import write_files
    from gpumemlab.classroom.stats.measures import item_stats
    from gpumemlab.classroom.stats.reading import StatsInputError, read_grades, read_items
    from gpumemlab.classroom.stats.plot import plot_png
    from gpumemlab.classroom.stats.view import csv_text, html_text, table_text

    from . import CLIError

    if not args.grades.is_file():
        raise CLIError(f"grades file {args.grades} does not exist")
    items = args.items
    if items is None and args.grades.with_name("items.csv").is_file() \
            and args.grades.name != "items.csv":
        items = args.grades.with_name("items.csv")
    if items is not None and not items.is_file():
        raise CLIError(f"items file {items} does not exist")
    try:
        grades = read_grades(args.grades)
        if items is not None:
            responses, students = read_items(items, grades)
        else:
            responses, students = grades, None
    except StatsInputError as exc:
        raise CLIError(str(exc)) from None
    stats = item_stats(responses, students)
    what = "questions" if items is not None else "assignments"
    title = f"Item statistics: {len(stats.items)} {what}, {stats.n_students} students"
    out = args.out if args.out is not None else args.grades.parent
    files = {out / "stats.csv": csv_text(stats),
             out / "stats.html": html_text(stats, title, plot_png(stats))}
    try:
        write_files(files)
    except OSError as exc:
        raise CLIError(f"cannot write {out}: {exc.strerror or exc}") from None
    if args.json:
        import dataclasses
        import json

        print(json.dumps({"items_are": what, "files": [str(p) for p in files],
                          **dataclasses.asdict(stats)}, indent=1))
        return 0
    source = f"questions from {items}" if items is not None else \
        f"assignments of {args.grades} (no items.csv)"
    print(f"{title} ({source})\n")
    print(table_text(stats))
    print(f"wrote {out / 'stats.csv'} and {out / 'stats.html'}")
    return 0

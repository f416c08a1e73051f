"""``gpumemlab lessons [DIR]``: copy the lessons out of the installed kit, to open in JupyterLab.

A pip user has the package but no checkout: the wheel carries the lesson notebooks
(setup.py maps ``notebooks/`` into the package), and this command copies them into DIR (default
``gpumemlab-lessons``) with ``cli.workcopy.sync``: run again after an upgrade, it refreshes the
lessons not touched since and keeps the ones the learner changed. ``./kit lab`` does the same
for a checkout, into its git-ignored ``lab/``.
"""
from __future__ import annotations

import shlex
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "lessons", help="copy the lesson notebooks into a folder of your own",
        description="Copy the lesson notebooks into DIR (first run), or refresh the ones you "
                    "have not changed (later runs); then open them with JupyterLab.")
    p.add_argument("dir", nargs="?", type=Path, default=Path("gpumemlab-lessons"),
                   help="folder for your copies (default: gpumemlab-lessons)")
    p.set_defaults(func=_lessons)


def _lessons(args) -> int:
    from . import CLIError
    from .workcopy import WorkCopyError, lessons_source, sync

    try:
        report = sync(lessons_source(), args.dir)
    except WorkCopyError as exc:
        raise CLIError(str(exc)) from None
    print(report.text())
    print(f"open them: jupyter lab {shlex.quote(str(args.dir))}   (start with 00_setup.ipynb)")
    return 0

"""The ``gpumemlab`` command: a thin dispatcher over subcommand groups.

Each group module (``gpumemlab.cli.snapshots``, ``gpumemlab.cli.classroom``) defines
``register(subparsers)``, adding its subcommands with ``set_defaults(func=...)``. A ``func``
returns the exit status. Errors meant for the user are raised as ``CLIError`` and printed as one
line, never as a traceback. ``gpumemlab --version`` prints the version; a bare ``gpumemlab``
prints the help and exits 0. Everything a command prints goes through ``gpumemlab.cli.output``'s
cleaning writer.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from .output import clean_output

GROUPS = ("gpumemlab.cli.snapshots", "gpumemlab.cli.doctor", "gpumemlab.cli.plan",
          "gpumemlab.cli.classroom", "gpumemlab.cli.gradescope", "gpumemlab.cli.stats",
          "gpumemlab.cli.selftest", "gpumemlab.cli.course", "gpumemlab.cli.lessons")


class CLIError(Exception):
    """An error to show the user as one line (exit status 2 unless given)."""

    def __init__(self, message: str, status: int = 2):
        super().__init__(message)
        self.status = status


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpumemlab",
        description="Learn, teach and investigate GPU memory management.")
    parser.add_argument("--version", action="version", version=f"gpumemlab {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in GROUPS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def _version() -> str:
    """The installed distribution's version (pip's record of it, as ``pip show`` says)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpumemlab")
    except PackageNotFoundError:
        return "(not installed: run from a source folder)"


def main(argv=None) -> int:
    parser = build_parser()
    # strings from snapshots and certificates, and arguments echoed in usage errors, are
    # printed without their terminal escapes
    with clean_output():
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):     # bare `gpumemlab`: what it can do, no error
            parser.print_help()
            return 0
        try:
            return int(args.func(args) or 0)
        except CLIError as exc:
            print(f"gpumemlab {args.command}: error: {exc}", file=sys.stderr)
            return exc.status
        except BrokenPipeError:          # e.g. piped into head: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no error at exit
            return 0
        except KeyboardInterrupt:
            print("gpumemlab: interrupted", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())

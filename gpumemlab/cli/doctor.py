"""``gpumemlab doctor`` and ``gpumemlab diff``: the OOM doctor and a comparison of two recordings.

* ``doctor SNAPSHOT [--total-memory SIZE] [--request SIZE] [--device N] [--time-budget S]
  [--workers N]``: snapshot mode;
  ``doctor --message TEXT``, ``doctor --message-file FILE`` (``-`` or ``doctor -``: stdin):
  message mode. ``--json`` prints the JSON report instead of the text, ``--html FILE`` also
  writes the self-contained HTML report. Exit 0 with a diagnosis, 2 for input it cannot read
  (a text that is no OOM message, a snapshot that is not one).
* ``diff A B [--json]``: bytes by allocation site (the culprit frame of each live block) that
  grew or shrank from A to B, sites new in B and sites gone (``--json``: every site, not the top).

The settings search shows a progress line on a terminal (``--quiet``: none).
"""
from __future__ import annotations

import json
import sys
import warnings

from gpumemlab.cli import CLIError
from gpumemlab.cli.progress import add_quiet, ticker
from gpumemlab.doctor.api import doctor
from gpumemlab.doctor.message import NotAnOOMMessage
from gpumemlab.recordings.files import SnapshotError, SnapshotWarning
from gpumemlab.recordings.replay.result import ReplayError
from gpumemlab.recordings.source import read_snapshot
from gpumemlab.viz.site_diff import diff_text, site_diff


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "doctor", help="diagnose an OOM from a snapshot or a pasted message",
        description="Diagnose a CUDA out-of-memory error: from a snapshot (replayed, settings "
                    "searched and verified) or from the text of the message.")
    p.add_argument("snapshot", nargs="?", help="snapshot file, or - to read a message from stdin")
    p.add_argument("--message", metavar="TEXT", help="the OOM message text")
    p.add_argument("--message-file", metavar="FILE", help="a file holding the message (- = stdin)")
    p.add_argument("--total-memory", metavar="SIZE",
                   help="the card's size, e.g. 80GiB or 79.33GiB as PyTorch prints it")
    p.add_argument("--request", metavar="SIZE", help="for a snapshot without a trace: a request "
                                                     "size to check against the state")
    p.add_argument("--device", type=int, default=None,
                   help="which device's trace (default: the one that ran out)")
    p.add_argument("--json", action="store_true", help="print the JSON report")
    p.add_argument("--html", metavar="FILE", help="write the HTML report to FILE")
    p.add_argument("--no-search", action="store_true", help="skip the settings search")
    p.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                   help="stop the settings search after this long (default 120)")
    p.add_argument("--workers", type=int, default=None,
                   help="processes for the search's replays (default: one per core)")
    add_quiet(p)
    p.set_defaults(func=cmd_doctor)

    p = subparsers.add_parser("diff", help="compare the live memory of two snapshots by site",
                              description="Bytes by allocation site that grew or shrank from A "
                                          "to B, sites new in B and sites gone.")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--top", type=int, default=15, help="sites to list per section (default 15)")
    p.add_argument("--json", action="store_true",
                   help="print every site's bytes and blocks in A and B as JSON")
    p.set_defaults(func=cmd_diff)


MESSAGE_LIMIT = 1 << 20   # bytes: an OOM message with its traceback is a few KiB


def _read_text(path) -> str:
    """A pasted message: stdin or a regular file, at most MESSAGE_LIMIT bytes (a FIFO or
    /dev/zero is refused at once instead of blocking or reading forever)."""
    if path == "-":
        data = sys.stdin.buffer.read(MESSAGE_LIMIT + 1)
        if len(data) > MESSAGE_LIMIT:
            raise CLIError(f"standard input: larger than the {MESSAGE_LIMIT}-byte limit for a "
                           f"message")
    else:
        from gpumemlab.recordings.bounded_read import read_regular_file

        data = read_regular_file(path, MESSAGE_LIMIT, CLIError, "message file")
    return data.decode("utf-8", errors="replace")


def cmd_doctor(args) -> int:
    given = [x for x in (args.snapshot, args.message, args.message_file) if x is not None]
    if len(given) != 1:
        raise CLIError("give one of: SNAPSHOT, --message TEXT, --message-file FILE (or -)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SnapshotWarning)
        try:
            if args.message is not None:
                d = doctor(message=args.message)
            elif args.message_file is not None or args.snapshot == "-":
                d = doctor(message=_read_text(args.message_file or "-"))
            else:
                what = "replaying" if args.no_search else "replaying and searching the settings"
                with ticker(args, f"doctor: {what}"):
                    d = doctor(args.snapshot, total_memory=args.total_memory,
                               request=args.request, device=args.device,
                               search=not args.no_search, workers=args.workers,
                               budget_s=args.time_budget)
        except NotAnOOMMessage as exc:
            raise CLIError(str(exc)) from None
        except (SnapshotError, ReplayError) as exc:
            raise CLIError(str(exc)) from None
        except ValueError as exc:        # a bad --total-memory or --request
            raise CLIError(str(exc)) from None
    for w in caught:
        print(f"note: {w.message}", file=sys.stderr)
    print(d.json() if args.json else str(d))
    if args.html:
        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(d.html())
        except OSError as exc:
            raise CLIError(f"{args.html}: cannot write ({exc.strerror or exc})") from None
        print(f"HTML report written to {args.html}", file=sys.stderr)
    return 0


def cmd_diff(args) -> int:
    snaps = []
    for path in (args.a, args.b):
        try:
            snaps.append(read_snapshot(path))
        except SnapshotError as exc:
            raise CLIError(str(exc)) from None
    d = site_diff(snaps[0].snapshot, snaps[1].snapshot)
    if args.json:
        keys = ("site", "bytes_a", "bytes_b", "blocks_a", "blocks_b")
        out = {"a": args.a, "b": args.b, "total_a_bytes": d["total_a"],
               "total_b_bytes": d["total_b"],
               **{k: [dict(zip(keys, row)) for row in d[k]] for k in ("grew", "shrank", "new",
                                                                      "gone")}}
        print(json.dumps(out, indent=1))
    else:
        print(diff_text(d, args.a, args.b, top=args.top))
    return 0

"""When a Gradescope submission was made and when it was due, read from its metadata file.

Gradescope writes ``/autograder/submission_metadata.json`` before ``run_autograder`` starts:
``created_at`` (the submission time), ``assignment.due_date`` and ``assignment.late_due_date``
(ISO 8601 with an offset, e.g. ``2018-07-01T14:22:32.365935-07:00``), ``users`` and
``previous_submissions``. Some course tools also find a per-student ``users[].assignment.due_date``
(an extension); when one is there it wins, the latest of a group's. ``users`` lists who
submitted (several for a group submission): ``email``, ``id`` (a number) and ``name`` in
Gradescope's documentation, and ``sid`` (the student ID of the course roster) in some courses'
files. The file is read as
untrusted: a regular file (never through a link, never a FIFO), at most ``METADATA_LIMIT`` bytes,
plain JSON (no NaN), and every field checked; anything else is a ``MetadataError`` with one line.
It is read before the submission's code runs, so that code cannot change what is read.
"""
from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from datetime import datetime

METADATA_NAME = "submission_metadata.json"
METADATA_LIMIT = 32 << 20   # previous_submissions carries earlier results.json files


class MetadataError(ValueError):
    """The metadata cannot tell the submission time or due date; the message says why."""


@dataclass(frozen=True)
class SubmissionTimes:
    submitted: datetime
    due: datetime = None        # None: the assignment has no due date
    extended: bool = False      # the due date is the student's own (an extension)


def _load(path) -> object:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise MetadataError(f"{METADATA_NAME} is missing") from None
    except OSError as exc:
        raise MetadataError(f"{METADATA_NAME} cannot be opened: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise MetadataError(f"{METADATA_NAME} is not a regular file")
        data = f.read(METADATA_LIMIT + 1)
    if len(data) > METADATA_LIMIT:
        raise MetadataError(f"{METADATA_NAME} is larger than {METADATA_LIMIT >> 20} MiB")

    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=refuse)
    except UnicodeDecodeError:
        raise MetadataError(f"{METADATA_NAME} is not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:
        raise MetadataError(f"{METADATA_NAME} is not JSON: "
                            f"{str(exc).splitlines()[0][:120] if str(exc) else 'too deep'}") \
            from None


def _time(value, what):
    from ..late import parse_time

    try:
        return parse_time(value, what)
    except ValueError as exc:
        raise MetadataError(f"{METADATA_NAME}: {exc}") from None


def read_times(path) -> SubmissionTimes:
    """The submission time and due date in the metadata file at ``path``."""
    meta = _load(path)
    if not isinstance(meta, dict):
        raise MetadataError(f"{METADATA_NAME} is not a JSON object")
    submitted = _time(meta.get("created_at"), "created_at")
    assignment = meta.get("assignment")
    if not isinstance(assignment, dict):
        raise MetadataError(f"{METADATA_NAME} has no assignment object")
    due = assignment.get("due_date")
    due = None if due is None else _time(due, "assignment.due_date")
    users = meta.get("users")
    own = []
    for user in (users if isinstance(users, list) else [])[:100]:
        mine = user.get("assignment") if isinstance(user, dict) else None
        if isinstance(mine, dict) and mine.get("due_date") is not None:
            own.append(_time(mine["due_date"], "users[].assignment.due_date"))
    if own:
        return SubmissionTimes(submitted, max(own), extended=due is None or max(own) != due)
    return SubmissionTimes(submitted, due)


def read_users(path) -> list:
    """The ``users`` of the metadata file at ``path``: a list of objects, one per student who
    submitted (at least one); MetadataError otherwise."""
    meta = _load(path)
    users = meta.get("users") if isinstance(meta, dict) else None
    if not isinstance(users, list) or not users or not all(isinstance(u, dict) for u in users):
        raise MetadataError(f"{METADATA_NAME} has no users list")
    return users

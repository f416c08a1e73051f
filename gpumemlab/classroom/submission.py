"""Reading a student's notebook cheaply: the JSON parser only, and only what the grader uses.

The grader rebuilds the notebook it runs from the source (``build``); of the student's file it
needs, per cell, the cell type, the nbgrader ``grade_id`` and the source text. So the file is
read with ``json`` (no nbformat, no schema validation: validating a crafted file costs gigabytes
and minutes per MiB), refused before parsing when it is over ``SIZE_LIMIT`` or holds more than
``CONTAINER_LIMIT`` JSON arrays and objects (an upper bound on what parsing it can build), and
refused after parsing when it has more than ``CELL_LIMIT`` cells. Outputs, attachments and every
other field are dropped unread. Errors are ``SubmissionError`` with a one-line message.
"""
from __future__ import annotations

import json
import os
import stat

SIZE_LIMIT = 16 << 20       # a lesson notebook with its outputs and plots is a few MiB
CONTAINER_LIMIT = 250_000   # '[' and '{' bytes, strings included: an upper bound, never less
CELL_LIMIT = 2000
SOURCE_LIMIT = 1 << 20      # characters of one cell's source
CELL_TYPES = ("code", "markdown", "raw")


class SubmissionError(ValueError):
    """A notebook the grader will not read; the message says why in one line."""


def _source(value, where) -> str:
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        value = "".join(value)
    if not isinstance(value, str):
        raise SubmissionError(f"{where}: the source is not text")
    if len(value) > SOURCE_LIMIT:
        raise SubmissionError(f"{where}: the source is longer than {SOURCE_LIMIT:,} characters")
    return value


def parse_submission(data: bytes):
    """The notebook in ``data`` as an nbformat v4 notebook of bare cells."""
    import nbformat

    if len(data) > SIZE_LIMIT:
        raise SubmissionError(f"it is larger than {SIZE_LIMIT >> 20} MiB")
    containers = data.count(b"[") + data.count(b"{")
    if containers > CONTAINER_LIMIT:
        raise SubmissionError(f"it holds {containers:,} JSON lists and objects (the limit is "
                              f"{CONTAINER_LIMIT:,})")
    try:
        raw = json.loads(data.decode("utf-8", "replace"))
    except RecursionError:
        raise SubmissionError("it is nested too deeply to be a notebook") from None
    except ValueError as exc:
        raise SubmissionError(f"it is not JSON ({str(exc)[:120]})") from None
    cells = raw.get("cells") if isinstance(raw, dict) else None
    if not isinstance(cells, list):
        raise SubmissionError("it has no list of cells")
    if len(cells) > CELL_LIMIT:
        raise SubmissionError(f"it has {len(cells):,} cells (the limit is {CELL_LIMIT:,})")
    nb = nbformat.v4.new_notebook()
    for i, cell in enumerate(cells):
        where = f"cell {i}"
        if not isinstance(cell, dict) or cell.get("cell_type") not in CELL_TYPES:
            continue   # not a cell the grader could use: as if it were not there
        source = _source(cell.get("source", ""), where)
        meta = cell.get("metadata")
        nbg = meta.get("nbgrader") if isinstance(meta, dict) else None
        gid = nbg.get("grade_id") if isinstance(nbg, dict) else None
        kind = cell["cell_type"]
        new = (nbformat.v4.new_code_cell if kind == "code" else
               nbformat.v4.new_markdown_cell if kind == "markdown" else
               nbformat.v4.new_raw_cell)(source)
        if isinstance(gid, str) and len(gid) <= 200:
            new.metadata["nbgrader"] = {"grade_id": gid}
        nb.cells.append(new)
    return nb


def read_submission(path):
    """Read ``path`` (a regular file, never followed through a link, never blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise SubmissionError(f"it cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SubmissionError("it is not a regular file")
        if st.st_size > SIZE_LIMIT:
            raise SubmissionError(f"it is larger than {SIZE_LIMIT >> 20} MiB")
        data = f.read(SIZE_LIMIT + 1)
    return parse_submission(data)

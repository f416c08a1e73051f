"""Taking submissions in: finding them, copying them safely, and naming them in reports.

Submissions are untrusted files. Finding and copying never follow a symbolic link and never open
anything but regular files and folders (a FIFO would block, a device would never end, a socket
cannot be read): links and special files are left out of the copy, with a note. Folder names may
hold any byte; reports show them with undecodable bytes escaped (``display_id``) and file names
made from them are safe and distinct (``safe_name``).
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

COPY_LIMIT_BYTES = 200 << 20
COPY_LIMIT_FILES = 500     # each becomes an open file handed to bwrap
STAMP_LIMIT = 64


def display_id(student_id: str) -> str:
    """The student id as readable text: undecodable bytes become ``\\xNN``."""
    return os.fsencode(student_id).decode("utf-8", "backslashreplace")


def safe_name(student_id: str) -> str:
    """A file name for the student's feedback folder: only ``\\w.@+-``; a short hash of the
    real name is added whenever characters had to be replaced, so names never collide."""
    text = display_id(student_id)
    cleaned = re.sub(r"[^\w.@+-]", "_", text, flags=re.ASCII).lstrip(".") or "_"
    if cleaned != text:
        cleaned += "-" + hashlib.sha256(os.fsencode(student_id)).hexdigest()[:8]
    return cleaned[:120]


def _walk(root: Path):
    """(relative folder, [(name, lstat)]) for every folder under root, links never followed."""
    stack = [Path(".")]
    while stack:
        rel = stack.pop()
        try:
            with os.scandir(root / rel) as it:
                entries = sorted(((e.name, e.stat(follow_symlinks=False)) for e in it),
                                 key=lambda x: os.fsencode(x[0]))
        except OSError:
            continue
        yield rel, entries
        stack.extend(rel / name for name, st in reversed(entries) if stat.S_ISDIR(st.st_mode))


def find_notebook(folder: Path, notebook_name: str):
    """The submission's notebook: the one named like the source, else the only .ipynb."""
    named, others = [], []
    for rel, entries in _walk(folder):
        if ".ipynb_checkpoints" in rel.parts:
            continue
        for name, st in entries:
            if stat.S_ISREG(st.st_mode) and name.endswith(".ipynb"):
                (named if name == notebook_name else others).append(rel / name)
    if named:
        return folder / sorted(named, key=lambda p: (len(p.parts), str(p)))[0]
    return folder / others[0] if len(others) == 1 else None


def find_submissions(root: Path, notebook_name: str, assignment: str = None) -> list:
    """[(student_id, student folder, notebook path or None)], sorted by student id. With an
    ``assignment``, a student's folder is ``<student>/<assignment>/`` where that is a real
    folder (nbgrader's ``submitted/`` layout once several assignments are collected)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"submissions folder {root} does not exist")
    found = []
    for name, st in sorted(((e.name, e.stat(follow_symlinks=False)) for e in os.scandir(root)),
                           key=lambda x: os.fsencode(x[0])):
        if stat.S_ISDIR(st.st_mode):
            folder = root / name
            if assignment and _is_real_folder(folder / assignment):
                folder = folder / assignment
            found.append((name, folder, find_notebook(folder, notebook_name)))
    return found


def _is_real_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def copy_submission(src: Path, dst: Path) -> list:
    """Copy folders and regular files only, up to COPY_LIMIT_FILES and COPY_LIMIT_BYTES (in the
    order found, shallow folders first); returns notes."""
    left_out, total, files, notes = 0, 0, 0, []
    dst.mkdir()
    for rel, entries in _walk(src):
        for name, st in entries:
            target = dst / rel / name
            if stat.S_ISDIR(st.st_mode):
                target.mkdir()
            elif stat.S_ISREG(st.st_mode) and total + st.st_size <= COPY_LIMIT_BYTES \
                    and files < COPY_LIMIT_FILES:
                files += 1
                try:
                    fd = os.open(src / rel / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    left_out += 1
                    continue
                with os.fdopen(fd, "rb") as fin, open(target, "wb") as fout:
                    if not stat.S_ISREG(os.fstat(fin.fileno()).st_mode):
                        left_out += 1   # swapped for something else since the listing
                        continue
                    while chunk := fin.read(1 << 20):
                        total += len(chunk)
                        if total > COPY_LIMIT_BYTES:
                            break
                        fout.write(chunk)
            else:
                left_out += 1
    if left_out:
        notes.append(f"{left_out} links, special files or files over the limits "
                     f"({COPY_LIMIT_FILES} files, {COPY_LIMIT_BYTES >> 20} MiB) were left out of "
                     f"the graded copy")
    return notes


def read_timestamp(folder: Path) -> str:
    """The submission's ``timestamp.txt``, cut to one short line: the one at its top (where
    nbgrader writes it), else the first regular one below. Read from the submission itself,
    before it is copied, so that no copy limit (files, bytes) can leave it out; opened without
    following a link or blocking on a FIFO."""
    for rel, entries in _walk(folder):
        for name, st in entries:
            if name == "timestamp.txt" and stat.S_ISREG(st.st_mode):
                try:
                    fd = os.open(folder / rel / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
                except OSError:
                    continue
                with os.fdopen(fd, "rb") as f:
                    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        continue   # swapped for something else since the listing
                    text = f.read(4 * STAMP_LIMIT).decode("utf-8", "replace")
                line = text.strip().splitlines()[0] if text.strip() else ""
                return "".join(c for c in line if c.isprintable())[:STAMP_LIMIT]
    return ""

"""What ``grade_one(keep=...)`` leaves out when it copies a graded run's home folder: the
entries that are neither folders, regular files nor links (``shutil.copytree``'s ``ignore``)."""
from __future__ import annotations

import os
import stat


def not_regular_entries(folder, names) -> set:
    """``copytree``'s ignore: entries neither folders, regular files nor links (a FIFO the
    student's code made would block or fail the copy of everything kept)."""
    skipped = set()
    for name in names:
        try:
            mode = os.lstat(os.path.join(folder, name)).st_mode
        except OSError:
            skipped.add(name)
            continue
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            skipped.add(name)
    return skipped

"""Write a set of output files all-or-nothing: every file goes to a temporary name beside its
target first, and only when all of them are written are they renamed into place.

A failure half-way (a full disk, a folder that cannot be made, a target that is a folder) leaves
the targets as they were and no temporary file behind. The renames themselves are atomic one by
one (``os.replace``), so a reader never sees a half-written file.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_files(contents: dict) -> None:
    """``{path: str or bytes}``: write them all, or none (see the module)."""
    done = []
    try:
        for path, data in contents.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
            done.append((tmp, path))
            with os.fdopen(fd, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)   # mkstemp makes 0600; outputs look like open()'s
        for _, path in done:   # the renames below can then only fail for a rare reason
            if path.is_dir():
                raise IsADirectoryError(f"{path} is a folder")
        for tmp, path in done:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in done:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise

"""Where the fake-CUDA library (``fake_cuda.py``) is built and kept, so that no other user can
make this user's planner load a library of theirs.

A shared library is code: loading ``gml_fake_cuda.so`` runs its constructors as the user. So a
cached library is used only when its folder is the user's own and private (owned by the user's
uid, mode 0700, not a symlink, every folder above it under the cache base owned by the user or
root and not writable by others unless sticky, as ``/tmp`` is) and the library is the one this
code built there (its SHA-256 equals the digest written beside it right after the build, and it
is owned by the user and not writable by others). A folder that fails any check is never written
to or read from: the library is then built in a fresh private folder (``tempfile.mkdtemp``, mode
0700), used by this process only, and the reason is kept (``last_reason``) for ``status()``.
A library with a wrong or missing digest in a good folder is removed and rebuilt there (ninja
would otherwise keep a planted ``.so`` newer than the source).
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile

__all__ = ["LIBRARY", "DIGEST", "problem", "private_folder", "verified_library", "record_digest",
           "clear_library", "last_reason"]

LIBRARY = "gml_fake_cuda.so"
DIGEST = "gml_fake_cuda.sha256"
_state = {"reason": None}


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stat_problem(path: str, st, *, private: bool) -> str | None:
    """Why ``path`` (already lstat-ed) cannot be trusted, or None."""
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    uid = os.getuid()
    if private:
        if st.st_uid != uid:
            return f"{path} is owned by uid {st.st_uid}, not by this user (uid {uid})"
        if st.st_mode & 0o077:
            return f"{path} has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
        return None
    if st.st_uid not in (uid, 0):
        return f"{path} is owned by uid {st.st_uid}, neither this user nor root"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return f"{path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def problem(folder: str, base: str) -> str | None:
    """Why the existing ``folder`` (under ``base``) must not hold the library, or None. Folders
    between ``base`` and ``folder`` are checked like the folder itself; ``base`` (the user's cache
    base, e.g. ``~/.cache``, which may legitimately be a symlink) only for who can write it."""
    try:
        base_st = os.stat(base)
    except OSError as exc:
        return f"cannot read {base}: {exc.strerror}"
    if base_st.st_uid not in (os.getuid(), 0):
        return f"{base} is owned by uid {base_st.st_uid}, neither this user nor root"
    if base_st.st_mode & 0o022 and not base_st.st_mode & stat.S_ISVTX:
        return f"{base} is writable by other users (mode {stat.S_IMODE(base_st.st_mode):04o})"
    rel = os.path.relpath(folder, base)
    path = base
    for part in rel.split(os.sep):
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except OSError as exc:
            return f"cannot read {path}: {exc.strerror}"
        why = _stat_problem(path, st, private=True)
        if why:
            return why
    return None


def _tighten(path: str) -> None:
    """An earlier version made its folders 0755: one of the user's own, not a symlink and never
    writable by others, held nothing anyone else wrote, so closing it to 0700 is safe."""
    st = os.lstat(path)
    if (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
            and st.st_mode & 0o077):
        os.chmod(path, 0o700)


def private_folder(folder: str, base: str) -> str:
    """``folder`` made (mode 0700) or found private and the user's own; otherwise a fresh private
    folder from ``tempfile.mkdtemp``, with the reason kept in ``last_reason()``."""
    _state["reason"] = None
    try:
        os.makedirs(base, exist_ok=True)
        rel = os.path.relpath(folder, base)
        path = base
        for part in rel.split(os.sep):
            path = os.path.join(path, part)
            try:
                os.mkdir(path, 0o700)   # mkdir, not makedirs: an existing one is checked below
            except FileExistsError:
                _tighten(path)
    except OSError:
        pass   # problem() below says what is wrong
    why = problem(folder, base)
    if why is None:
        return folder
    _state["reason"] = (f"the fake-CUDA cache was not used ({why}); the library is built in a "
                        f"fresh private folder for this run")
    return tempfile.mkdtemp(prefix="gpumemlab-fake-cuda-")


def verified_library(folder: str) -> str | None:
    """The library in ``folder`` if it is this user's, not writable by others, and its SHA-256 is
    the digest recorded at its build; else None."""
    lib, digest = os.path.join(folder, LIBRARY), os.path.join(folder, DIGEST)
    try:
        st = os.lstat(lib)
        dst = os.lstat(digest)
        with open(digest, encoding="ascii") as f:
            want = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    for s in (st, dst):
        if not stat.S_ISREG(s.st_mode) or s.st_uid != os.getuid() or s.st_mode & 0o022:
            return None
    return lib if _sha256(lib) == want else None


def clear_library(folder: str) -> None:
    """Remove a library that failed verification (and its digest), so that the build remakes it."""
    for name in (LIBRARY, DIGEST):
        try:
            os.remove(os.path.join(folder, name))
        except FileNotFoundError:
            pass


def record_digest(folder: str) -> str:
    """Write the freshly built library's SHA-256 beside it (mode 0600); returns the library path."""
    lib = os.path.join(folder, LIBRARY)
    os.chmod(lib, 0o700)
    fd = os.open(os.path.join(folder, DIGEST), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(_sha256(lib) + "\n")
    return lib


def last_reason() -> str | None:
    """Why the last ``private_folder`` call did not use the cache, or None."""
    return _state["reason"]

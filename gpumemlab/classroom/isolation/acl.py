"""One user shut out of a folder by a POSIX access ACL entry, and let back in.

An unprivileged run (``unprivileged``) has no mount namespace to hide the grader's own gpumemlab,
its banks and a source checkout; a named-user entry with no permission does, for that uid only:
the kernel checks a named user entry before the "other" bits (``acl(5)``), so every other user's
access is unchanged. The entries are read and written as the kernel stores them in the
``system.posix_acl_access`` attribute (``linux/posix_acl_xattr.h``): a version, then (tag,
permissions, id) records sorted by tag and id. The mask is the owning group's permissions, so
the mode bits do not change.

Each change reads the whole list and writes it back, so two graders changing one folder at once
(two ``grade`` commands, a ``grade`` beside ``run_autograder``) could each write back a list
without the other's entry, and a run would find the grader's gpumemlab open again. Every
change therefore holds an exclusive ``flock`` on one lock file (``lock_path``: in ``/run``,
root's, for a root grader) for the time of its read and write; entries are per uid, each run's
its own, so no count is needed.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
import tempfile
import threading

_ACL, _ACL_VERSION = "system.posix_acl_access", 2
_USER_OBJ, _USER, _GROUP_OBJ, _MASK, _OTHER = 0x01, 0x02, 0x04, 0x10, 0x20
_NO_ID = 0xFFFFFFFF
_acl_lock = threading.Lock()
LOCK_NAME = "gpumemlab-acl.lock"


def lock_path() -> str:
    """Where every grader of this machine takes the ACL lock: ``/run`` for root (a folder only
    root may write, so no one else can plant or hold the file), else the user's own file in the
    temporary folder (ACLs a user may set are on that user's own folders)."""
    if os.geteuid() == 0:
        return os.path.join("/run", LOCK_NAME)
    return os.path.join(tempfile.gettempdir(), f"{LOCK_NAME}.{os.geteuid()}")


@contextlib.contextmanager
def _locked():
    """The ACL lock of the machine (threads of this grader and other grader processes)."""
    with _acl_lock:
        path = lock_path()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise PermissionError(f"{path} is not a file of this user's: the ACL lock "
                                      f"cannot be trusted")
            fcntl.flock(fd, fcntl.LOCK_EX)   # released when the fd is closed
            yield
        finally:
            os.close(fd)


def _acl_read(path) -> list:
    try:
        raw = os.getxattr(path, _ACL, follow_symlinks=False)
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise
        mode = os.lstat(path).st_mode   # no ACL yet: the one the mode bits say
        return [(_USER_OBJ, (mode >> 6) & 7, _NO_ID), (_GROUP_OBJ, (mode >> 3) & 7, _NO_ID),
                (_OTHER, mode & 7, _NO_ID)]
    return [struct.unpack_from("<HHI", raw, 4 + 8 * i) for i in range((len(raw) - 4) // 8)]


def _acl_write(path, entries) -> None:
    group = [e[1] for e in entries if e[0] == _GROUP_OBJ][0]
    if not any(e[0] == _USER for e in entries):   # back to the mode bits alone
        try:
            os.removexattr(path, _ACL, follow_symlinks=False)
        except OSError as exc:
            if exc.errno != errno.ENODATA:
                raise
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        os.chmod(path, (mode & ~0o070) | (group << 3))   # the group bits were the mask's
        return
    if not any(e[0] == _MASK for e in entries):   # named entries need a mask: the group's
        entries = entries + [(_MASK, group, _NO_ID)]
    entries = sorted(entries, key=lambda e: (e[0], e[2]))
    os.setxattr(path, _ACL, struct.pack("<I", _ACL_VERSION) +
                b"".join(struct.pack("<HHI", *e) for e in entries), follow_symlinks=False)


def deny(paths, uid: int) -> list:
    """Shut ``uid`` out of each folder of ``paths`` by a named ACL entry with no permission
    (it then counts before the "other" bits; nobody else's access changes). -> the folders
    that could not be closed so (a file system without ACLs), which ``probe`` reports."""
    failed = []
    with _locked():
        for path in paths:
            try:
                entries = [e for e in _acl_read(path) if not (e[0] == _USER and e[2] == uid)]
                _acl_write(path, entries + [(_USER, 0, uid)])
            except OSError:
                failed.append(path)
    return failed


def allow_again(paths, uid: int) -> None:
    """Remove what ``deny`` added for ``uid`` (a uid no account has: an entry left behind by a
    killed grader shuts out no one)."""
    with _locked():
        for path in paths:
            try:
                entries = _acl_read(path)
                if any(e[0] == _USER and e[2] == uid for e in entries):
                    _acl_write(path, [e for e in entries if not (e[0] == _USER and e[2] == uid)])
            except OSError:
                pass

"""The disk and shared memory one unprivileged run may fill, bounded per run, not per file.

``RLIMIT_FSIZE`` bounds each file a run writes (32 MiB), not how many: a submission writing
files in a loop filled the grader's disk, and its classmates graded beside it then failed
(0/4, their feedback blaming them). And files in ``/dev/shm`` outlive the run that made them
(256 MiB were left there after grading). Two ways, chosen per run by what root may do here:

* **mounts** (``RunSpace``, ``private_shm``): where the grader may mount (root with
  CAP_SYS_ADMIN, as on a plain Linux machine), the run's temporary folder is a tmpfs of its own,
  sized to the copied submission plus ``RUN_DISK_BYTES`` (a full one fails that run's writes
  only, and nothing reaches the grader's disk), and the executor starts in a mount and IPC
  namespace of its own (``unshare``) whose ``/dev/shm`` is a private tmpfs of
  ``SHM_BYTES``: it, and every System V segment, is gone with the run's last process;
* otherwise (a Docker container without CAP_SYS_ADMIN), a **watchdog** (``Watchdog``) adds up,
  while the run lasts, the blocks of the run's folders and of every file its uid owns in the
  shared temporary folders (``SHARED_TMP``), and ends the run (every process of its uid) once
  they pass ``RUN_DISK_BYTES`` plus the copy: the run that wrote too much is the one stopped,
  and it is told so. After the run, whatever its uid left in those folders is removed
  (``remove_leftovers``).

A run that failed while the grader's own disk was nearly full is told that it was not its doing
(``disk_note``), whichever run filled it.
"""
from __future__ import annotations

import ctypes
import functools
import os
import shutil
import stat
import subprocess
import threading

RUN_DISK_BYTES = 256 << 20     # what one run may write beyond its copy: folders and /dev/shm
SHM_BYTES = 64 << 20           # a private /dev/shm (within RUN_DISK_BYTES for the watchdog)
SHARED_TMP = ("/dev/shm", "/tmp", "/var/tmp")   # world-writable folders a run could fill
LOW_DISK_BYTES = 64 << 20      # free space under which a failed run is told it is not its fault
_MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MNT_DETACH = 2, 4, 32, 2   # sys/mount.h


def _libc():
    return ctypes.CDLL(None, use_errno=True)


class RunSpace:
    """A tmpfs mounted at ``folder`` (an empty folder of the grader's) for one run, or nothing
    where this grader cannot mount (``mounted`` False). ``fit`` shrinks it to what it holds
    plus ``RUN_DISK_BYTES`` once the submission is copied; ``close`` unmounts it."""

    def __init__(self, folder, size_bytes: int):
        self.folder = os.fsencode(str(folder))
        self.mounted = False
        if os.geteuid() != 0:
            return
        opts = f"size={int(size_bytes)},nr_inodes={RUN_INODES},mode=0700".encode()
        flags = ctypes.c_ulong(_MS_NOSUID | _MS_NODEV)
        if _libc().mount(b"gml-run", self.folder, b"tmpfs", flags, opts) == 0:
            self.mounted = True

    def fit(self, extra_bytes: int = RUN_DISK_BYTES) -> None:
        if not self.mounted:
            return
        st = os.statvfs(self.folder)
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        opts = f"size={used + int(extra_bytes)}".encode()
        flags = ctypes.c_ulong(_MS_REMOUNT | _MS_NOSUID | _MS_NODEV)
        _libc().mount(b"gml-run", self.folder, b"tmpfs", flags, opts)

    def close(self) -> None:
        if self.mounted:
            _libc().umount2(self.folder, _MNT_DETACH)
            self.mounted = False


@functools.lru_cache(maxsize=1)
def private_shm_works() -> bool:
    """Whether ``unshare`` can give a run a mount namespace with a tmpfs ``/dev/shm`` here."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(private_shm(["/bin/true"]), capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def private_shm(argv: list, size_bytes: int = SHM_BYTES) -> list:
    """``argv`` started in a mount and IPC namespace of its own whose ``/dev/shm`` is a tmpfs of
    ``size_bytes`` (mounted by root before ``argv``, which drops root, runs)."""
    mount = (f"mount -t tmpfs -o size={int(size_bytes)},mode=1777,nosuid,nodev gml-shm "
             f"/dev/shm && exec \"$@\"")
    return [shutil.which("unshare") or "unshare", "--mount", "--ipc", "--propagation",
            "private", "--", "/bin/sh", "-c", mount, "sh"] + list(argv)


def _blocks(path: str, st) -> int:
    return st.st_blocks * 512 if not stat.S_ISLNK(st.st_mode) else 0


# What a folder with more entries than ``folder_bytes`` looks at counts as: over any run's limit.
FLOOD_BYTES = 1 << 50
# Inodes of a run's tmpfs: far more than a notebook needs, far fewer than a flood of empty files.
RUN_INODES = 100_000


def folder_bytes(top, limit_entries: int = 200_000) -> int:
    """Blocks used under ``top`` (links not followed); past ``limit_entries`` entries,
    ``FLOOD_BYTES``: a million empty files is a flood too, and a walk that stopped there would
    not see what is written below them."""
    total, seen = 0, 0
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            seen += 1
            if seen > limit_entries:
                return FLOOD_BYTES
            try:
                total += _blocks(name, os.lstat(os.path.join(dirpath, name)))
            except OSError:
                pass
    return total


def owned_in_shared(uid: int, folders=SHARED_TMP) -> list:
    """The entries of ``folders`` (top level) that ``uid`` owns."""
    found = []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            path = os.path.join(folder, name)
            try:
                if os.lstat(path).st_uid == uid:
                    found.append(path)
            except OSError:
                pass
    return found


def shared_bytes(uid: int, folders=SHARED_TMP) -> int:
    total = 0
    for path in owned_in_shared(uid, folders):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        total += folder_bytes(path) if stat.S_ISDIR(st.st_mode) else _blocks(path, st)
    return total


def remove_leftovers(uid: int, folders=SHARED_TMP) -> int:
    """Remove what ``uid`` (a finished run's, all its processes dead) left in ``folders``.
    -> how many entries."""
    removed = 0
    for path in owned_in_shared(uid, folders):
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
            removed += 1
        except OSError:
            pass
    return removed


class Watchdog:
    """While a run lasts: its folders' blocks plus what its uid holds in the shared temporary
    folders, every ``every_s``; past ``limit_bytes``, ``stop`` (which ends the run) is called
    once and ``tripped`` is set."""

    def __init__(self, folders, uid: int, limit_bytes: int, stop, every_s: float = 0.1,
                 shared=SHARED_TMP):
        self.folders, self.uid, self.limit, self.stop_run = list(folders), uid, limit_bytes, stop
        self.every, self.shared = every_s, shared
        self.tripped, self.most = False, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def used(self) -> int:
        return sum(folder_bytes(f) for f in self.folders) + shared_bytes(self.uid, self.shared)

    def _watch(self):
        while not self._done.wait(self.every):
            used = self.used()
            self.most = max(self.most, used)
            if used > self.limit:
                self.tripped = True
                self.stop_run()
                return

    def close(self):
        self._done.set()
        self._thread.join()


def free_bytes(folder) -> int:
    try:
        st = os.statvfs(folder)
    except OSError:
        return 1 << 62
    return st.f_bavail * st.f_frsize


def disk_note(folder) -> str:
    """For a run that did not finish: "" unless the grader's disk was nearly full, then a line
    saying so (whoever filled it, it was not this run's doing when its own space is bounded)."""
    free = free_bytes(folder)
    if free >= LOW_DISK_BYTES:
        return ""
    return (f"the grading machine's disk was nearly full while this notebook ran ({free >> 20} "
            f"MiB free): the result may not be yours to answer for; ask your teacher to grade "
            f"it again")

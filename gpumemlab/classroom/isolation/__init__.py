"""The OS sandbox one submission runs in: bubblewrap (``bwrap``), the notebook executor inside.

Inside, the submission sees a read-only system (``/usr``, ``/etc``, the Python installation and
its packages), a read-only *student kit* (``kit``: gpumemlab without the quiz answers, the grader
and any module an exercise withholds), a private writable copy of its own folder at
``/home/student`` (a size-limited tmpfs filled by bwrap, so nothing written there reaches the
grader's disk), the grader's exchange folder ``/grader`` read-only (the built notebook in) with
one writable file (``result.json``: the answers out as JSON), private tmpfs ``/tmp`` and
``/dev/shm``, a minimal ``/dev``, no network (an own network namespace with only
loopback, which the kernel's ZeroMQ channels need), and its own PID, IPC and UTS namespaces, so it
cannot see or signal the grader, other kernels or anything else on the machine. The teacher's
folders, other submissions and every other path of the machine do not exist there.

When the grader runs as root, the sandbox runs as ``nobody`` (uid 65534) in a user namespace that
maps only root and ``nobody``: root is needed once, by bwrap, to reach paths such as
``/root/.pyenv``; the sandbox itself is ``nobody``, so the process limit (``RLIMIT_NPROC``, which
never binds root) applies, and nothing it does runs with root's rights. Resource limits (CPU time,
address space, processes, file size, open files) are set by the executor itself (``runner``)
before it starts the kernel, which inherits them; the grader kills the sandbox at the notebook's
wall limit, and with it, through the PID namespace, every process inside.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

INSIDE_HOME = "/home/student"
INSIDE_IO = "/grader"
INSIDE_KIT = "/opt/gpumemlab-kit"
NOBODY = 65534
KERNEL_PATH = "/usr/bin:/bin"  # every kernel's PATH, sandboxed or not: none of the grader's
TMPFS_BYTES = 256 << 20        # each of /tmp and /dev/shm without a memory limit (confine)
WRITABLE_IO = ("result.json", "executed.ipynb")   # the only files the sandbox writes outside
_SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


def running_as_root() -> bool:
    return os.geteuid() == 0


def python_roots() -> list:
    """The folders holding this interpreter, its standard library and its packages."""
    roots = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    kept = []
    for r in roots:   # a root inside another is bound by its parent
        if not any(r.startswith(k + os.sep) for k in kept):
            kept.append(r)
    return [r for r in kept if not r.startswith("/usr" + os.sep) and r != "/usr"]


def _installed_copies(roots) -> list:
    """gpumemlab packages installed under the bound roots (masked: the kit is the only copy)."""
    found = []
    for entry in sys.path:
        real = os.path.realpath(entry) if entry else ""
        if real and any(real == r or real.startswith(r + os.sep) for r in roots + ["/usr"]):
            pkg = os.path.join(real, "gpumemlab")
            if os.path.isdir(pkg):
                found.append(pkg)
    return sorted(set(found))


def _dirs_for(dest: str) -> list:
    parents = []
    p = Path(dest).parent
    while str(p) != "/":
        parents.append(str(p))
        p = p.parent
    return [x for d in reversed(parents) for x in ("--perms", "0755", "--dir", d)]


def bwrap_argv(home, io, kit, *, userns_fd=None, masks=(), seccomp_fd=None,
               tmpfs_bytes=TMPFS_BYTES, home_bytes=TMPFS_BYTES) -> list:
    """The bwrap command line up to (not including) the command run inside."""
    argv = ["bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "gpumemlab-grader", "--clearenv"]
    argv += ["--userns", str(userns_fd)] if userns_fd is not None else ["--unshare-user"]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    for link in _SYSTEM_LINKS:
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            argv += ["--ro-bind", link, link]
    argv += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
             "--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu",
             "--proc", "/proc", "--dev", "/dev"]
    for tmp in ("/dev/shm", "/tmp"):
        argv += ["--perms", "1777", "--size", str(int(tmpfs_bytes)), "--tmpfs", tmp]
    roots = python_roots()
    for root in roots:
        argv += _dirs_for(root) + ["--ro-bind", root, root]
    for mask in list(_installed_copies(roots)) + [str(m) for m in masks]:
        argv += ["--tmpfs", mask]
    argv += _dirs_for(INSIDE_KIT) + ["--ro-bind", str(kit), INSIDE_KIT]
    argv += _dirs_for(INSIDE_HOME) + ["--perms", "0777", "--size", str(int(home_bytes)),
                                      "--tmpfs", INSIDE_HOME]
    argv += ["--ro-bind", str(io), INSIDE_IO]
    for name in WRITABLE_IO:
        if (Path(io) / name).is_file():
            argv += ["--bind", str(Path(io) / name), f"{INSIDE_IO}/{name}"]
    argv += ["--chdir", INSIDE_HOME]
    for name, value in (("PATH", KERNEL_PATH), ("LANG", "C.UTF-8"), ("HOME", INSIDE_HOME),
                        ("PYTHONPATH", INSIDE_KIT), ("PYTHONNOUSERSITE", "1")):
        argv += ["--setenv", name, value]
    return argv


def setpriv_nobody(setpriv: str = "setpriv", uid: int = NOBODY) -> list:
    """``setpriv`` becoming ``uid`` (nobody by default) for good: no groups, every capability
    dropped (an empty bounding set) and no_new_privs (setuid files do nothing)."""
    return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]


def become_nobody() -> list:
    """bwrap keeps only what setpriv needs to become nobody; setpriv then drops the rest."""
    return ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
            *setpriv_nobody()]


class MappedUserNamespace:
    """A user namespace mapping only root and nobody (for a root grader), held open by an fd.

    ``unshare --user sleep`` makes the namespace; root writes its maps (no newuidmap needed);
    the fd to ``/proc/PID/ns/user`` keeps it alive after the sleeper is gone.
    """

    def __init__(self):
        self.fd = None
        proc = subprocess.Popen(["unshare", "--user", "sleep", "60"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        try:
            ns = f"/proc/{proc.pid}/ns/user"
            # Wait until the sleeper is inside its new namespace: writing the maps of a process
            # still in ours is EPERM. A count of yields was too short on a loaded machine (CI
            # skipped every sandbox test), so the wait is by the clock.
            deadline = time.monotonic() + 10.0
            while not (os.path.exists(ns) and os.readlink(ns) != os.readlink("/proc/self/ns/user")):
                if proc.poll() is not None:
                    raise OSError(f"unshare --user failed: "
                                  f"{proc.stderr.read().decode(errors='replace').strip()}")
                if time.monotonic() > deadline:
                    raise OSError("unshare --user did not enter a new user namespace in 10 s")
                time.sleep(0.001)
            mapping = f"0 0 1\n{NOBODY} {NOBODY} 1\n"
            for name in ("uid_map", "gid_map"):
                with open(f"/proc/{proc.pid}/{name}", "w") as f:
                    f.write(mapping)
            self.fd = os.open(ns, os.O_RDONLY | os.O_CLOEXEC)
        finally:
            proc.kill()
            proc.wait()
            proc.stderr.close()

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def give_to_sandbox(io, uid: int = NOBODY) -> None:
    """Make the exchange files the sandbox writes its own (``uid``'s, when the grader is root)."""
    for name in WRITABLE_IO:
        path = Path(io) / name
        if path.is_file():
            os.chmod(path, 0o666)
            if running_as_root():
                os.chown(path, uid, uid, follow_symlinks=False)


def home_files(home) -> tuple:
    """(bwrap arguments, fds, bytes) that fill the sandbox's /home/student with a copy of
    ``home`` (folders and regular files only; ``intake.copy_submission`` made it so)."""
    args, fds, size = [], [], 0
    home = Path(home)
    for dirpath, dirnames, filenames in os.walk(home):
        rel = Path(dirpath).relative_to(home)
        for d in sorted(dirnames):
            args += ["--perms", "0777", "--dir", f"{INSIDE_HOME}/{(rel / d).as_posix()}"]
        for f in sorted(filenames):
            fd = os.open(Path(dirpath) / f, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            fds.append(fd)
            size += os.fstat(fd).st_size
            args += ["--perms", "0666", "--file", str(fd), f"{INSIDE_HOME}/{(rel / f).as_posix()}"]
    return args, fds, size


def sandboxed_command(home, io, kit, inner: list, *, masks=(), memory_bytes=None):
    """-> (argv, pass_fds, cleanup). ``inner`` runs inside the sandbox; /home/student is a
    size-limited tmpfs holding a copy of ``home``, so nothing the sandbox writes lands on the
    grader's disk except the exchange files (``WRITABLE_IO``, capped by RLIMIT_FSIZE). With
    ``memory_bytes``, the tmpfs mounts are sized from it (``confine.tmpfs_bytes``); memfd and
    System V shared memory are always denied (``confine.seccomp_program``)."""
    from .confine import seccomp_fd, tmpfs_bytes

    seccomp = seccomp_fd()   # first: an unknown architecture raises before any fd is held
    ns = MappedUserNamespace() if running_as_root() else None
    fd = ns.fd if ns is not None else None
    files, fds, size = home_files(home)
    fds.append(seccomp)
    tmp = tmpfs_bytes(memory_bytes) if memory_bytes else TMPFS_BYTES
    argv = bwrap_argv(home, io, kit, userns_fd=fd, masks=masks, seccomp_fd=fds[-1],
                      tmpfs_bytes=tmp, home_bytes=size + tmp) + files \
        + (become_nobody() if fd is not None else []) + list(inner)
    keep = ([fd] if fd is not None else []) + fds

    def cleanup():
        for f in fds:
            os.close(f)
        if ns is not None:
            ns.close()
    return argv, tuple(keep), cleanup


@functools.lru_cache(maxsize=1)
def unavailable_reason():
    """None when a sandbox can be made here; otherwise one line saying why not."""
    from .confine import UnknownArchitecture

    for tool in ("bwrap",) + (("unshare", "setpriv") if running_as_root() else ()):
        if shutil.which(tool) is None:
            return (f"{tool} is not installed (Debian: apt-get install bubblewrap"
                    f"{' util-linux' if tool != 'bwrap' else ''})")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gml-sandbox-check-") as tmp:
        home, io, kit = (Path(tmp) / n for n in ("home", "io", "kit"))
        for d in (home, io, kit):
            d.mkdir()
            os.chmod(d, 0o755)
        (io / "result.json").write_text("")
        give_to_sandbox(io)
        try:
            argv, fds, cleanup = sandboxed_command(
                home, io, kit, [sys.executable, "-c",
                                "import os; open('/grader/result.json', 'w').write('ok')"])
        except OSError as exc:
            return f"cannot make a user namespace: {exc}"
        except UnknownArchitecture as exc:   # one line, as every other reason, not a traceback
            return str(exc)
        try:
            proc = subprocess.run(argv, pass_fds=fds, capture_output=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"bwrap did not run: {exc}"
        finally:
            cleanup()
        if proc.returncode != 0 or (io / "result.json").read_text() != "ok":
            err = proc.stderr.decode(errors="replace").strip().splitlines()
            return f"bwrap cannot make a sandbox here: {err[-1] if err else proc.returncode}"
    return None

"""A submission run without the OS sandbox by a root grader: run it as a user of its own.

Where bubblewrap cannot run (``gpumemlab grade --no-sandbox``; a Gradescope container, whose
Docker seccomp profile usually refuses user namespaces) and the grader is root, the notebook
executor, and with it the kernel, is started through ``setpriv`` as an unprivileged user of its
own: a uid and gid no account has and no live process uses (``pick_uid``, from ``UID_FIRST`` on),
no supplementary groups, every capability dropped, ``no_new_privs``. Like ``nobody``, it owns no
file of the machine; unlike ``nobody``, it is this run's alone, which the sandbox's kernels
(``nobody`` inside bwrap) and other runs are not. That needs no namespace, only the CAP_SETUID
and CAP_SETGID that Docker grants root by default. Then:

* the grader's temporary folder of the submission is handed over for the run (``hand_over``):
  the folder itself root's and traversable only (0711), the private copy of the submission and
  the exchange folder the run's uid's and 0700, their files 0600 (a concurrent run, another
  uid, can neither read the notebook graded beside it nor touch its ``result.json``); the
  student kit is world-readable anyway; everything else the grader makes (``mkdtemp``: 0700)
  stays unreachable;
* the executor and its kernel run ``python -S`` with the kit and a view of the interpreter's
  packages without gpumemlab on their path (``site_view``): the kit is the only gpumemlab they
  import, as in the sandbox; the installed copy's folder is reported when the uid can read it;
* the process limit binds (``RLIMIT_NPROC`` never binds root);
* after the run, every process of the run's uid is killed (``kill_leftovers``): a ``setsid``'d
  process escapes the process group, not the uid, and a process whose main thread exited (a
  zombie leader) lives on in its other threads, which ``/proc/PID/task`` shows. No other process has that uid, so runs may
  go side by side and nothing else is touched.

What stays open without namespaces: the network; where the kernel has no Landlock
(``landlock``), every file any user may read (the Python installation, world-readable files of
the machine, ``/tmp``, and the teacher's folders when their modes allow it, which ``probe``
reports); ``/dev/shm`` where root may not mount (``space``: otherwise a private one, and the
run's folders on a tmpfs of their own; else a watchdog bounds what the run writes); signals to
processes of the same uid (none but the run's own). The run's temporary files go to a folder of
its own (``private_env``), not to ``/tmp``. ``probe`` runs
once per grading run; where ``setpriv`` is missing or fails, the caller runs nothing
(``grade.RootRunsRefused``) unless the teacher allowed runs as root. In the texts a teacher or student reads, this user is "an unprivileged user"; the
code calls the mode ``nobody``, the role it plays.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import setpriv_nobody
from .acl import allow_again, deny
from ..procfs import process_stats

UID_FIRST, UID_COUNT = 1_900_000_000, 100_000_000   # below 2**31; no distribution allots these
_taken, _taken_lock = set(), threading.Lock()

RUNTIME = "runtime"        # the Jupyter runtime folder, in the exchange folder (runner's job)
TMP = "tmp"                # the executor's temporary folder, in the exchange folder
_PROBE = r'''
import json, os, sys
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
ids = (os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups())
uid = int(sys.argv[2])
if ids != (uid, uid, uid, uid, []):
    sys.exit(f"still running as {ids}")
if int(status["CapEff"], 16) or int(status["CapBnd"], 16) or status["NoNewPrivs"].strip() != "1":
    sys.exit("capabilities were not dropped")
import ipykernel, jupyter_client, nbclient, gpumemlab.classroom.runner, subprocess
if not gpumemlab.__file__.startswith(sys.argv[3]):
    sys.exit(f"gpumemlab is imported from {gpumemlab.__file__}, not the kit")
try:   # the executor starts the kernel as nobody: the interpreter must be reachable by path
    subprocess.run([sys.executable, "-S", "-c", "import ipykernel"], check=True, capture_output=True)
except (OSError, subprocess.CalledProcessError) as exc:
    sys.exit(f"the kernel's interpreter cannot start as an unprivileged user ({exc})")
exposed = []
for path in json.loads(sys.argv[1]):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").close()
        exposed.append((path, "read"))
    except OSError:
        pass
    if os.access(path, os.W_OK):
        exposed.append((path, "change"))
print(json.dumps(exposed))
'''


UID_LOCKS = Path("/run/gpumemlab-uids")   # one flock'd file per uid a grader of the machine holds
_locks = {}


def _lock_uid(uid: int, folder: Path = None) -> bool:
    """Take ``uid`` for this grader among every grader of the machine: an exclusive ``flock`` on
    ``UID_LOCKS/<uid>``, held until ``release_uid`` (or this process's end: a crashed grader
    holds nothing). -> False where another grader holds it. Where the folder cannot be made
    (not root), True: the uid is then this process's alone, by the check of live processes."""
    import fcntl

    folder = UID_LOCKS if folder is None else folder
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # the file may have been removed by its last holder after we opened it: not a lock
        if os.fstat(fd).st_ino != os.stat(folder / str(uid)).st_ino:
            raise BlockingIOError
    except OSError:
        os.close(fd)
        return False
    _locks[uid] = (fd, folder / str(uid))
    return True


def pick_uid() -> int:
    """A uid for one run: no live process has it, no other run of this grader or of another
    grader on the machine holds it (``_lock_uid``)."""
    rng = random.SystemRandom()
    with _taken_lock:
        while True:
            uid = UID_FIRST + rng.randrange(UID_COUNT)
            if uid not in _taken and _lock_uid(uid):
                if not _processes_of(uid):
                    _taken.add(uid)
                    return uid
                _unlock_uid(uid)


def _unlock_uid(uid: int) -> None:
    fd, path = _locks.pop(uid, (None, None))
    if fd is not None:
        try:
            os.unlink(path)   # still locked: a grader that opened it meanwhile sees no lock
        except OSError:
            pass
        os.close(fd)


def release_uid(uid: int) -> None:
    with _taken_lock:
        _taken.discard(uid)
        _unlock_uid(uid)


def python_path(kit) -> str:
    """PYTHONPATH of an unprivileged run: the kit, then its view of the packages."""
    return os.pathsep.join([str(kit), str(Path(kit) / SITE_VIEW)])


def command(inner: list, uid: int, *, kit=None, writable=()) -> list:
    """``inner`` as ``uid``; given the ``kit``, also under a Landlock allow-list
    (``landlock.restricted``): the kit, the packages and the system to read, ``writable`` (the
    run's own folders) and the temporary folders to write, nothing else of the machine."""
    if kit is not None:
        from .landlock import restricted

        inner = restricted(inner, [kit, *site_folders()], writable)
    return setpriv_nobody(shutil.which("setpriv") or "setpriv", uid) + list(inner)


def probe(kit, protect=()) -> tuple:
    """-> (None or why an unprivileged user cannot run the executor here,
    [(path, "read"|"change")] of ``protect`` that such a user can reach). Runs the interpreter
    once as a uid of its own, importing what the executor imports from the kit, and starting it
    again from there as the executor starts the kernel (``setpriv`` itself may exec a path
    such a user cannot reach)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return "setpriv is not installed (Debian: apt-get install util-linux)", []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "PYTHONPATH": python_path(kit), "PYTHONNOUSERSITE": "1", "HOME": "/"}
    uid = pick_uid()
    hidden = installed_copies()   # hidden from the probe's uid too: it sees what a run sees
    deny(hidden, uid)
    argv = setpriv_nobody(setpriv, uid) + [sys.executable, "-S", "-c", _PROBE,
                                         json.dumps([str(p) for p in protect]), str(uid),
                                         str(kit)]
    try:
        proc = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"setpriv did not run: {exc}", []
    finally:
        kill_leftovers(0, uid)
        allow_again(hidden, uid)
        release_uid(uid)
    lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    if proc.returncode != 0:
        return lines[-1] if lines else f"setpriv: exit status {proc.returncode}", []
    try:
        return None, [tuple(x) for x in json.loads(proc.stdout.strip().splitlines()[-1])]
    except (ValueError, IndexError):
        return f"the check as an unprivileged user said: {lines[-1] if lines else 'nothing'}", []


def hand_over(base: Path, home: Path, io: Path, uid: int) -> None:
    """Make one submission's temporary folders usable by the run's ``uid``, and only by it.

    ``base`` stays root's and traversable only (0711), so the uid cannot rename or replace the
    two folders the grader reads back; the copy of the submission and the exchange folder are
    the uid's and 0700 (no other run's uid may enter them), and the result files the grader
    created in it are the uid's and 0600."""
    os.chmod(base, 0o711)
    for name in (RUNTIME, TMP):   # the run's own, not /tmp: the allow-list has no /tmp
        (io / name).mkdir(mode=0o700, exist_ok=True)
    for top in (home, io):
        for dirpath, dirnames, filenames in os.walk(top):
            for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
                os.chown(name, uid, uid, follow_symlinks=False)
                if not os.path.islink(name):
                    os.chmod(name, 0o700 if os.path.isdir(name) else 0o600)


def private_env(io: Path) -> dict:
    """The executor's temporary folders, inside the run's 0700 exchange folder: Python's
    ``tempfile`` (TMPDIR, TEMP, TMP) and Jupyter's runtime folder (connection files). The
    kernel gets its own below the submission's copy (``runner``); neither is in ``/tmp``,
    where the grader's and other runs' files are, and which the allow-list leaves out."""
    tmp = str(io / TMP)
    return {"TMPDIR": tmp, "TEMP": tmp, "TMP": tmp, "JUPYTER_RUNTIME_DIR": str(io / RUNTIME)}


def take_back(base: Path) -> None:
    os.chmod(base, 0o700)


def close_folders(folders) -> list:
    """Make the grades' folders (``grades.csv``'s and the feedback's) root's alone (0700)
    before any submission runs as another uid: last week's grades and a classmate's feedback
    are not for it to read. Folders not there yet are made so. -> a line per folder closed."""
    said = []
    for folder in folders:
        folder = Path(folder)
        if not folder.exists():
            folder.mkdir(mode=0o700, parents=True)
            continue
        st = os.lstat(folder)
        if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o077:
            os.chmod(folder, 0o700)
            said.append(f"made {folder} 0700 (was {stat.S_IMODE(st.st_mode):04o}): submissions "
                        f"run as another user must not read earlier grades")
    return said


SITE_VIEW = "site"   # in the kit: the interpreter's packages without gpumemlab (``site_view``)


def _gpumemlab_entry(name: str) -> bool:
    low = name.lower()
    return low.endswith(".pth") or low.startswith("gpumemlab") or \
        (low.startswith("__editable__") and "gpumemlab" in low)


def site_folders() -> list:
    """The interpreter's site-packages folders (real paths), where the site view's links go."""
    import site

    folders = [p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))]
    folders += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    return list(dict.fromkeys(os.path.realpath(f) for f in folders))


def site_view(kit) -> Path:
    """``kit/site``: a link to every entry of the interpreter's site-packages except gpumemlab's
    own (the package, its metadata, an editable install's finder) and ``.pth`` files. Started
    with ``python -S`` and this folder after the kit on its path, the executor and its kernel
    find numpy, torch and Jupyter, and the kit as the only gpumemlab: an unprivileged run has
    no mount namespace to hide the installed copy, so it is left off the path instead (and the
    copy's folder itself is reported when that uid can read it: ``installed_copies``)."""
    view = Path(kit) / SITE_VIEW
    view.mkdir(mode=0o755, exist_ok=True)
    for folder in site_folders():
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if _gpumemlab_entry(name) or (view / name).exists() or (view / name).is_symlink():
                continue
            (view / name).symlink_to(os.path.join(os.path.realpath(folder), name))
    return view


def installed_copies() -> list:
    """The folders of gpumemlab besides the kit that the grader imports from or has installed,
    and the question banks: an unprivileged run must reach none of them (``deny``)."""
    import gpumemlab

    found = {os.path.realpath(os.path.dirname(gpumemlab.__file__))}
    for folder in sys.path:
        pkg = os.path.join(folder or ".", "gpumemlab")
        if folder.rstrip("/").endswith(("site-packages", "dist-packages")) and os.path.isdir(pkg):
            found.add(os.path.realpath(pkg))
    try:
        from gpumemlab.quizkit.bank import quizzes_dir

        found.add(os.path.realpath(quizzes_dir()))
    except Exception:   # no banks found: nothing to hide
        pass
    checkout = os.path.dirname(os.path.realpath(os.path.dirname(gpumemlab.__file__)))
    if os.path.isfile(os.path.join(checkout, "pyproject.toml")):
        # a source checkout: its tests, docs and fixtures hold answers too. Every entry of it,
        # except one holding the interpreter or its packages (a .venv inside the checkout)
        import site
        import sysconfig

        roots = [sys.prefix, sys.exec_prefix, sys.base_prefix] + site.getsitepackages() + \
            [sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
        keep = {os.path.realpath(p) for p in roots if p}
        for name in os.listdir(checkout):
            entry = os.path.join(checkout, name)
            if not any(k == entry or k.startswith(entry + os.sep) for k in keep):
                found.add(entry)
    return sorted(found)


def boot_ticks() -> int:
    """Now, in the unit of ``/proc/PID/stat``'s start time (clock ticks since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _state(stat: bytes) -> tuple:
    """(state letter, start time in boot ticks) from a ``/proc/.../stat`` line."""
    rest = stat[stat.rindex(b")") + 2:].split()   # the name may hold spaces and ")"
    return rest[0], int(rest[19])


def _live(entry: str, leader_state: bytes) -> bool:
    """A process is alive while any of its threads is: a leader that exited (state Z) leaves
    its other threads running, and the group is reaped only when they end."""
    if leader_state not in (b"Z", b"X"):
        return True
    try:
        tasks = os.listdir(f"/proc/{entry}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{entry}/task/{tid}/stat", "rb") as f:
                if _state(f.read())[0] not in (b"Z", b"X"):
                    return True
        except (OSError, ValueError, IndexError):
            continue
    return False


def _processes_of(uid: int, since: int = 0) -> list:
    """Live processes (thread groups with a live thread) whose real uid is ``uid``, started
    at or after ``since`` (boot ticks)."""
    found = []
    for pid, stat in process_stats():
        try:
            with open(f"/proc/{pid}/status", "rb") as f:
                real = next(line.split()[1] for line in f if line.startswith(b"Uid:"))
            state, start = _state(stat)
        except (OSError, StopIteration, IndexError, ValueError):
            continue   # gone meanwhile
        if int(real) == uid and start >= since and _live(str(pid), state):
            found.append(pid)
    return found


def kill_until_none(find, rounds: int = 50, after=None) -> int:
    """Stop, then kill, every process ``find()`` lists, until it lists none (a process may
    fork while the list is read); ``after(pids)`` once a round. -> how many were killed."""
    killed = set()
    for _ in range(rounds):
        pids = find()
        if not pids:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):   # stopped first: none forks meanwhile
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        killed.update(pids)
        time.sleep(0.01)   # let the kernel deliver the signals before looking again
        if after is not None:
            after(pids)
    return len(killed)


def kill_leftovers(since: int, uid: int, rounds: int = 50) -> int:
    """Stop, then kill, every process of ``uid`` started since ``since``, until none is left.
    -> how many were killed."""
    return kill_until_none(lambda: _processes_of(uid, since), rounds)

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
  the folder itself traversable only (0711), the private copy of the submission owned by the
  run's uid, the exchange folder root's and read-only but for ``result.json`` (and the kept
  executed notebook) and the Jupyter runtime folder; the student kit is world-readable anyway;
  everything else the grader makes (``mkdtemp``: 0700) stays unreachable;
* the process limit binds (``RLIMIT_NPROC`` never binds root);
* after the run, every process of the run's uid is killed (``kill_leftovers``): a ``setsid``'d
  process escapes the process group, not the uid. No other process has that uid, so runs may
  go side by side and nothing else is touched.

What stays open without namespaces: the network; every file any user may read (the Python
installation, world-readable files of the machine, and the teacher's folders when their modes
allow it, which ``probe`` reports); files left in world-writable folders such as ``/tmp``;
signals to processes of the same uid (none but the run's own). ``probe`` runs once per grading
run; where ``setpriv`` is missing or fails, the caller runs the submission as root, as before,
and says so. In the texts a teacher or student reads, this user is "an unprivileged user"; the
code calls the mode ``nobody``, the role it plays.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import give_to_sandbox, setpriv_nobody

UID_FIRST, UID_COUNT = 1_900_000_000, 100_000_000   # below 2**31; no distribution allots these
_taken, _taken_lock = set(), threading.Lock()

RUNTIME = "runtime"        # the Jupyter runtime folder, in the exchange folder (runner's job)
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
try:   # the executor starts the kernel as nobody: the interpreter must be reachable by path
    subprocess.run([sys.executable, "-c", "import ipykernel"], check=True, capture_output=True)
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


def pick_uid() -> int:
    """A uid for one run: no live process has it, no other run of this grader holds it."""
    rng = random.SystemRandom()
    with _taken_lock:
        while True:
            uid = UID_FIRST + rng.randrange(UID_COUNT)
            if uid not in _taken and not _processes_of(uid):
                _taken.add(uid)
                return uid


def release_uid(uid: int) -> None:
    with _taken_lock:
        _taken.discard(uid)


def command(inner: list, uid: int) -> list:
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
           "PYTHONPATH": str(kit), "PYTHONNOUSERSITE": "1", "HOME": "/"}
    uid = pick_uid()
    argv = setpriv_nobody(setpriv, uid) + [sys.executable, "-c", _PROBE,
                                         json.dumps([str(p) for p in protect]), str(uid)]
    try:
        proc = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"setpriv did not run: {exc}", []
    finally:
        kill_leftovers(0, uid)
        release_uid(uid)
    lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    if proc.returncode != 0:
        return lines[-1] if lines else f"setpriv: exit status {proc.returncode}", []
    try:
        return None, [tuple(x) for x in json.loads(proc.stdout.strip().splitlines()[-1])]
    except (ValueError, IndexError):
        return f"the check as an unprivileged user said: {lines[-1] if lines else 'nothing'}", []


def hand_over(base: Path, home: Path, io: Path, uid: int) -> None:
    """Make one submission's temporary folders usable by the run's ``uid``, and only those."""
    os.chmod(base, 0o711)   # traversable, not listable: only the two known names inside
    os.chmod(io, 0o755)
    for dirpath, dirnames, filenames in os.walk(home):
        for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            os.chown(name, uid, uid, follow_symlinks=False)
    runtime = io / RUNTIME
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.chown(runtime, uid, uid, follow_symlinks=False)
    give_to_sandbox(io, uid)


def take_back(base: Path) -> None:
    os.chmod(base, 0o700)


def boot_ticks() -> int:
    """Now, in the unit of ``/proc/PID/stat``'s start time (clock ticks since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _processes_of(uid: int, since: int = 0) -> list:
    """Live processes whose real uid is ``uid``, started at or after ``since`` (boot ticks)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/status", "rb") as f:
                real = next(line.split()[1] for line in f if line.startswith(b"Uid:"))
        except (OSError, StopIteration, IndexError):
            continue   # gone meanwhile
        rest = stat[stat.rindex(b")") + 2:].split()   # the name may hold spaces and ")"
        if int(real) == uid and rest[0] not in (b"Z", b"X") and int(rest[19]) >= since:
            found.append(int(entry))
    return found


def kill_leftovers(since: int, uid: int, rounds: int = 50) -> int:
    """Stop, then kill, every process of ``uid`` started since ``since``, until none is left
    (a process may fork while the list is read). -> how many were killed."""
    killed = set()
    for _ in range(rounds):
        pids = _processes_of(uid, since)
        if not pids:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        killed.update(pids)
        time.sleep(0.01)   # let the kernel deliver the signals before looking again
    return len(killed)

"""A submission run without the OS sandbox by a root grader: run it as ``nobody`` instead.

Where bubblewrap cannot run (``gpumemlab grade --no-sandbox``; a Gradescope container, whose
Docker seccomp profile usually refuses user namespaces) and the grader is root, the notebook
executor, and with it the kernel, is started through ``setpriv`` as ``nobody`` (uid and gid
65534, no supplementary groups, every capability dropped, ``no_new_privs``). That needs no
namespace, only the CAP_SETUID and CAP_SETGID that Docker grants root by default. Then:

* the grader's temporary folder of the submission is handed over for the run (``hand_over``):
  the folder itself traversable only (0711), the private copy of the submission owned by
  ``nobody``, the exchange folder root's and read-only but for ``result.json`` (and the kept
  executed notebook) and the Jupyter runtime folder; the student kit is world-readable anyway;
  everything else the grader makes (``mkdtemp``: 0700) stays unreachable;
* the process limit binds (``RLIMIT_NPROC`` never binds root);
* every submission runs as the same uid, so they run one at a time (the caller's lock), and
  after each run every process of uid 65534 started since the run began is killed
  (``kill_leftovers``): a ``setsid``'d process escapes the process group, not the uid. This
  assumes nothing else on the grading machine or container runs as ``nobody``.

What stays open without namespaces: the network; every file any user may read (the Python
installation, world-readable files of the machine, and the teacher's folders when their modes
allow it, which ``probe`` reports); files left in world-writable folders such as ``/tmp``;
signals to other processes of ``nobody``. ``probe`` runs once per grading run; where
``setpriv`` is missing or fails, the caller runs the submission as root, as before, and says so.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .isolation import NOBODY, give_to_sandbox, setpriv_nobody

RUNTIME = "runtime"        # the Jupyter runtime folder, in the exchange folder (runner's job)
_PROBE = r'''
import json, os, sys
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
ids = (os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups())
if ids != (65534, 65534, 65534, 65534, []):
    sys.exit(f"still running as {ids}")
if int(status["CapEff"], 16) or int(status["CapBnd"], 16) or status["NoNewPrivs"].strip() != "1":
    sys.exit("capabilities were not dropped")
import ipykernel, jupyter_client, nbclient, gpumemlab.classroom.runner, subprocess
try:   # the executor starts the kernel as nobody: the interpreter must be reachable by path
    subprocess.run([sys.executable, "-c", "import ipykernel"], check=True, capture_output=True)
except (OSError, subprocess.CalledProcessError) as exc:
    sys.exit(f"the kernel's interpreter cannot start as nobody ({exc})")
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


def command(inner: list) -> list:
    return setpriv_nobody(shutil.which("setpriv") or "setpriv") + list(inner)


def probe(kit, protect=()) -> tuple:
    """-> (None or why nobody cannot run the executor here, [(path, "read"|"change")] of
    ``protect`` that nobody can reach). Runs the interpreter as nobody once, importing what
    the executor imports from the kit, and starting it again from there as the executor
    starts the kernel (``setpriv`` itself may exec a path nobody cannot reach)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return "setpriv is not installed (Debian: apt-get install util-linux)", []
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "PYTHONPATH": str(kit), "PYTHONNOUSERSITE": "1", "HOME": "/"}
    argv = setpriv_nobody(setpriv) + [sys.executable, "-c", _PROBE,
                                    json.dumps([str(p) for p in protect])]
    try:
        proc = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"setpriv did not run: {exc}", []
    lines = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    if proc.returncode != 0:
        return lines[-1] if lines else f"setpriv: exit status {proc.returncode}", []
    try:
        return None, [tuple(x) for x in json.loads(proc.stdout.strip().splitlines()[-1])]
    except (ValueError, IndexError):
        return f"the check as nobody said: {lines[-1] if lines else 'nothing'}", []


def hand_over(base: Path, home: Path, io: Path) -> None:
    """Make one submission's temporary folders usable by nobody, and only those."""
    os.chmod(base, 0o711)   # traversable, not listable: only the two known names inside
    os.chmod(io, 0o755)
    for dirpath, dirnames, filenames in os.walk(home):
        for name in [dirpath] + [os.path.join(dirpath, n) for n in dirnames + filenames]:
            os.chown(name, NOBODY, NOBODY, follow_symlinks=False)
    runtime = io / RUNTIME
    runtime.mkdir(mode=0o700, exist_ok=True)
    os.chown(runtime, NOBODY, NOBODY, follow_symlinks=False)
    give_to_sandbox(io)


def take_back(base: Path) -> None:
    os.chmod(base, 0o700)


def boot_ticks() -> int:
    """Now, in the unit of ``/proc/PID/stat``'s start time (clock ticks since boot)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def _nobody_since(since: int) -> list:
    """Live processes whose real uid is nobody's, started at or after ``since``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/status", "rb") as f:
                uid = next(line.split()[1] for line in f if line.startswith(b"Uid:"))
        except (OSError, StopIteration, IndexError):
            continue   # gone meanwhile
        rest = stat[stat.rindex(b")") + 2:].split()   # the name may hold spaces and ")"
        if int(uid) == NOBODY and rest[0] not in (b"Z", b"X") and int(rest[19]) >= since:
            found.append(int(entry))
    return found


def kill_leftovers(since: int, rounds: int = 50) -> int:
    """Stop, then kill, every process of nobody started since ``since``, until none is left
    (a process may fork while the list is read). -> how many were killed."""
    killed = set()
    for _ in range(rounds):
        pids = _nobody_since(since)
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

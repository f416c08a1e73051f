"""Execute one prepared notebook in a fresh kernel, cell by cell, surviving what students do.

Run as a worker process: ``python -m gpumemlab.classroom.runner JOB.json``. The job names the
notebook, the working folder (the submission's temporary copy), the per-cell timeout and the
result file. A cell that times out or kills the kernel is recorded, the kernel is restarted, and
the cells before it (minus the culprits, minus test cells) are replayed so that later answers still
get graded. After each cell the result file is rewritten, so the parent keeps what was graded even
when it must kill this worker at the notebook's wall-clock limit.

In the classroom this runs inside the OS sandbox (``isolation``), kernel and all; it sets the
resource limits the job names before starting the kernel. For each test cell it records whether
the checks made inside passed (the kernel's execute reply is an error named ``GmlGraderPass``
with the expected token, see ``kernel_guard``) and the answers the cell sent out as JSON text; the
grader judges those answers outside (``verdicts``).
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

MAX_RESTARTS = 3
WALL_FACTOR = 4   # a cell's wall-clock cap, in cell timeouts (``CellClock``)
OUTPUT_LIMIT = 2000
ANSWERS_MIME = "text/x-gpumemlab-answers"
ANSWERS_LIMIT = 256 << 10   # every answer of one test cell, as JSON: kilobytes are enough


def set_limits(limits: dict) -> None:
    """Resource limits for this executor and the kernel it starts (inherited across exec)."""
    import resource

    names = {"cpu_s": resource.RLIMIT_CPU, "memory_bytes": resource.RLIMIT_AS,
             "processes": resource.RLIMIT_NPROC, "file_bytes": resource.RLIMIT_FSIZE,
             "open_files": resource.RLIMIT_NOFILE}
    for key, value in (limits or {}).items():
        if value:
            resource.setrlimit(names[key], (int(value), int(value)))


def _answers(cell):
    """The first answers output of a test cell (the rest, if any, are the student's doing)."""
    for out in cell.get("outputs", []):
        text = out.get("data", {}).get(ANSWERS_MIME) if out.get("output_type") == \
            "display_data" else None
        if isinstance(text, str):   # too large: the grader says so instead of judging
            return text if len(text) <= ANSWERS_LIMIT else json.dumps({"too_large": len(text)})
    return None


def _text_outputs(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    text = "".join(parts)
    return text if len(text) <= OUTPUT_LIMIT else text[:OUTPUT_LIMIT] + "\n... (cut)"


def cpu_seconds(pid) -> float:
    """CPU time of ``pid`` and of its children it reaped (``/proc/PID/stat``), or 0."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            stat = f.read()
        rest = stat[stat.rindex(b")") + 2:].split()
        return sum(int(x) for x in rest[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return 0.0


class CellClock:
    """One cell's time limit, counted against CPU time, not the wall clock alone: other
    submissions' processes (twelve ``setsid`` busy loops, say) may take the machine's cores, and a
    classmate's 4 s cell then took more than 20 s of wall time and timed out. A cell is stopped
    (``expired``) once it ran ``limit_s`` of wall time *and* used ``limit_s`` of CPU; a cell
    waiting on nothing (a sleep) is stopped by nbclient at ``WALL_FACTOR`` times the limit.

    With ``uid`` (a run with a uid of its own: the sandbox's nobody in its PID namespace, or the
    unprivileged mode's uid), the CPU counted is that of every process of ``uid`` but this
    executor (``procfs.uid_cpu``, one walk of ``/proc``), so busy loops a cell forked and never
    reaped are charged to the run's cells, not to nobody; at expiry every such process is
    killed, the kernel among them. Without it, the kernel's own CPU (and its reaped children's)."""

    def __init__(self, kernel_pid, limit_s: float, every_s: float = 0.25, uid=None):
        import threading

        self.pid, self.limit, self.every, self.uid = kernel_pid, float(limit_s), every_s, uid
        self.expired = False
        self._start_cpu, self._start = self._cpu()[0], time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _cpu(self) -> tuple:
        """(CPU seconds, the pids to kill at expiry)."""
        if self.uid is None:
            return cpu_seconds(self.pid), [self.pid]
        from .procfs import uid_cpu

        return uid_cpu(self.uid, leave_out={os.getpid()})

    def used(self) -> tuple:
        return time.monotonic() - self._start, self._cpu()[0] - self._start_cpu

    def _watch(self):
        import signal

        while not self._done.wait(self.every):
            cpu, pids = self._cpu()
            if time.monotonic() - self._start >= self.limit and cpu - self._start_cpu >= \
                    self.limit:
                self.expired = True
                for _ in range(20):   # stopped first, so that none forks meanwhile
                    for sig in (signal.SIGSTOP, signal.SIGKILL):
                        for pid in pids:
                            try:
                                os.kill(pid, sig)   # nbclient then sees a dead kernel
                            except (OSError, TypeError):
                                pass
                    if self.uid is None:
                        break
                    time.sleep(0.01)
                    pids = self._cpu()[1]
                    if not pids:
                        break
                return

    def close(self):
        self._done.set()
        self._thread.join()


def _kernel_manager(runtime: str, sockets: str = "tcp"):
    """A kernel manager that runs ipykernel with this very interpreter (on Unix sockets where
    the run shares the machine's network)."""
    from jupyter_client.manager import AsyncKernelManager

    # nbclient needs the async manager: a blocking client would stall its timeout handling.
    km = AsyncKernelManager(kernel_name="python3")
    # Unix sockets inside the run's own 0700 runtime folder, not TCP on 127.0.0.1: without a
    # network namespace (the unprivileged mode) any local process can list TCP listeners in
    # /proc/net/tcp and subscribe to a kernel's iopub channel, which needs no key, and so read a
    # classmate's cells and answers as they run.
    if sockets == "ipc":
        km.transport = "ipc"
        km.ip = kernel_socket_prefix(runtime)
    # -S when this executor was started so (an unprivileged run: no site-packages gpumemlab)
    argv = [sys.executable] + (["-S"] if sys.flags.no_site else []) + [
            "-m", "ipykernel_launcher", "-f", "{connection_file}",
            "--HistoryManager.enabled=False"]
    km.kernel_spec.argv = argv
    return km


SOCKET_PATH_LIMIT = 100   # sun_path holds 108 bytes; ports add "-NNNNN"


def kernel_socket_prefix(runtime: str) -> str:
    os.makedirs(runtime, mode=0o700, exist_ok=True)   # the sockets are made before any file
    prefix = os.path.join(runtime, "k")
    if len(prefix.encode()) + 6 > SOCKET_PATH_LIMIT:
        raise RuntimeError(f"the run's runtime folder {runtime!r} is too long for a Unix socket "
                           f"path ({SOCKET_PATH_LIMIT} bytes); use a shorter grading folder")
    return prefix


def run_job(job: dict) -> dict:
    import nbformat
    from nbclient import NotebookClient
    from jupyter_core.utils import run_sync
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    workdir = Path(job["workdir"])
    nb = nbformat.read(job["notebook"], as_version=4)
    result_path = Path(job["result"])
    state = {"tests": {}, "events": [], "cells_run": 0, "kernel_pid": None, "finished": False}

    def save():
        # in place: inside the sandbox this file is a single bind-mounted file
        with open(result_path, "r+" if result_path.exists() else "w", encoding="utf-8") as f:
            f.write(json.dumps(state))
            f.truncate()

    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
    env.update({"HOME": str(workdir), "IPYTHONDIR": str(workdir / ".ipython"),
                "MPLCONFIGDIR": str(workdir / ".matplotlib"), "MPLBACKEND": "Agg",
                "JUPYTER_RUNTIME_DIR": job["runtime"],
                "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": str(workdir / ".tmp"),
                "GPUMEMLAB_HEADLESS": "1",
                "GPUMEMLAB_PROGRESS": str(workdir / ".gpumemlab-progress.json"),
                "GPUMEMLAB_QUIZ_SEED": job.get("seed", "0"),
                "PYTHONPATH": os.pathsep.join(job["pythonpath"])})
    (workdir / ".tmp").mkdir(exist_ok=True)   # ipykernel keeps cell files here for tracebacks
    sockets = job.get("kernel_sockets", "tcp")
    client = NotebookClient(nb, km=_kernel_manager(job["runtime"], sockets),
                            timeout=job["cell_timeout"] * WALL_FACTOR,   # CellClock: CPU
                            allow_errors=True,
                            interrupt_on_timeout=False, startup_timeout=60,
                            resources={"metadata": {"path": str(workdir)}})
    cells = nb.cells
    roles = [c.metadata.get("gpumemlab_grader", {}) for c in cells]
    skip = set()

    def record_test(i, reply):
        info = roles[i]
        content = (reply or {}).get("content", {})
        passed = content.get("status") == "error" and content.get("ename") == "GmlGraderPass" \
            and content.get("evalue") == info["token"]
        output = "" if passed else _text_outputs(cells[i])
        state["tests"].setdefault(info["grade_id"], {"passed": passed, "output": output,
                                                     "answers": _answers(cells[i])})

    clock = {}

    def execute(i, replay=False):
        reply_box = {}
        client.on_cell_executed = lambda cell, cell_index, execute_reply: \
            reply_box.setdefault("reply", execute_reply)
        clock["now"] = CellClock(state["kernel_pid"], job["cell_timeout"],
                                 uid=os.getuid() if job.get("cpu_by_uid") else None)
        try:
            client.execute_cell(cells[i], i, store_history=False)
        finally:
            clock["now"].close()
        if roles[i].get("role") == "test" and not replay:
            record_test(i, reply_box.get("reply"))

    def start():
        # a fresh manager: a shut-down one cannot be reused
        client.km = _kernel_manager(job["runtime"], sockets)
        client.start_new_kernel(env=env, cwd=str(workdir))
        client.start_new_kernel_client()
        try:
            state["kernel_pid"] = client.km.provisioner.process.pid
        except AttributeError:
            pass
        save()

    def stop():
        try:
            client.kc.stop_channels()
        except Exception:
            pass
        try:
            run_sync(client.km.shutdown_kernel)(now=True)
        except Exception:
            pass

    restarts = 0
    start()
    try:
        i = 0
        while i < len(cells):
            if i in skip or cells[i].cell_type != "code":
                i += 1
                continue
            try:
                execute(i)
                state["cells_run"] += 1
            except (CellTimeoutError, DeadKernelError, RuntimeError) as exc:
                timed_out = isinstance(exc, CellTimeoutError) or \
                    ("now" in clock and clock["now"].expired)
                kind = "timeout" if timed_out else "kernel died"
                state["events"].append({"cell": i, "event": kind, "role": roles[i].get("role"),
                                        "grade_id": roles[i].get("grade_id")})
                if roles[i].get("role") == "test":
                    state["tests"].setdefault(roles[i]["grade_id"], {
                        "passed": False, "output": f"test cell stopped: {kind}"})
                skip.add(i)
                restarts += 1
                if restarts > MAX_RESTARTS or roles[i].get("role") == "startup":
                    state["events"].append({"cell": i, "event": "gave up"})
                    break
                stop()
                start()
                for j in range(i):   # rebuild the state the later cells expect
                    if j not in skip and cells[j].cell_type == "code" \
                            and roles[j].get("role") != "test":
                        execute(j, replay=True)
            save()
            i += 1
        state["finished"] = True
    finally:
        save()
        stop()
        if job.get("executed"):   # kept for the teacher (grade --keep): outputs included
            nbformat.write(nb, job["executed"])
    return state


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    set_limits(job.get("limits"))
    started = time.monotonic()
    state = run_job(job)
    print(f"ran {state['cells_run']} cells in {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

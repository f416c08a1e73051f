"""Judging out of the grader's process: every answer is judged in a child with its own limits.

A judge (``verdicts.verdict``: the quiz checker, a function's outputs against the reference, a
lesson exercise run on the simulator) works on data the student chose, so it must not be able to
take the grader's memory or time. A *judging worker* (``python -m gpumemlab.classroom.judge_pool``,
one per grading thread, started once and reused) imports the judges, then for each answer forks
a child that sets an address-space limit (what the worker already maps plus ``memory_bytes``)
and a CPU limit (``cpu_s``), judges, and writes its verdict to a pipe; the worker kills a child
that runs past ``wall_s``. An answer over ``ANSWER_LIMIT`` bytes of JSON is refused before any
judge sees it. Whatever happens to a child (a limit, a crash, a judge's bug) fails that one test
with a one-line reason; the other answers are judged as usual.

Forking happens in the worker, a single-threaded process, never in the grader (which runs a
thread pool); the worker itself never runs a judge, so a child's death costs nothing else.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

ANSWER_LIMIT = 64 << 10          # bytes of JSON per answer: what any question needs, and more
VERDICT_LIMIT = 16 << 10         # bytes a child may send back
LIMITS = {"memory_bytes": 1 << 30, "cpu_s": 20, "wall_s": 30}
# Judges that plan a training step: 16.ex runs the planner (a GPT step on fake tensors) up to
# three times, the answer's and the two one-block-cheaper ones. Measured: 6 s of CPU and 10-20 s
# of wall time for a right answer, and past 30 s with both cores of a 2-core machine busy, so
# a right answer failed. Their budget is three times the others', never below the teacher's.
SLOW_JUDGES = {"16.ex": {"cpu_s": 60, "wall_s": 90}}
GRADER_ERROR = "the grader could not judge this answer"


def _one_line(text, limit=300) -> str:
    from gpumemlab.cleantext import clean_text

    return clean_text(text, limit=limit, keep_newlines=False)


def _clean(text) -> str:
    from gpumemlab.cleantext import clean_text

    return clean_text(text, limit=600)


def _mapped_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _judge_in_child(item: dict, limits: dict, wfd: int) -> None:
    """Runs in the forked child: limits, verdict, one JSON line to ``wfd``; never returns."""
    import resource

    status = 0
    try:
        cpu = max(1, int(limits["cpu_s"]))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        room = _mapped_bytes() + int(limits["memory_bytes"])
        resource.setrlimit(resource.RLIMIT_AS, (room, room))
        from .verdicts import verdict

        try:
            ok, message = verdict(item["request"], item["reply"], item["seed"])
            out = {"ok": bool(ok), "message": _clean(message)}
        except MemoryError:
            out = {"ok": False, "message": f"{item['request']['question']}: judging this "
                                           f"answer needed more than "
                                           f"{limits['memory_bytes'] >> 20} MiB (the limit per "
                                           f"answer)"}
        except RecursionError:
            out = {"ok": False, "message": f"{item['request']['question']}: the answer is "
                                           f"nested too deeply to judge"}
        except Exception as exc:   # a judge's bug: this test fails, the teacher's log says why
            print(f"gpumemlab grade: judging {item['request'].get('question')} for "
                  f"{_one_line(item.get('who', ''), 120)} failed: "
                  f"{_one_line(f'{type(exc).__name__}: {exc}')}", file=sys.stderr, flush=True)
            out = {"ok": False, "message": GRADER_ERROR}
        data = json.dumps(out).encode()[:VERDICT_LIMIT]
        while data:
            data = data[os.write(wfd, data):]
    except BaseException:
        status = 1
    finally:
        os._exit(status)


def judge_one(item: dict, limits: dict) -> dict:
    """Fork a child for one answer and wait for its verdict within ``wall_s``: {ok, message}."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        _judge_in_child(item, limits, wfd)
    os.close(wfd)
    chunks, size, deadline = [], 0, time.monotonic() + float(limits["wall_s"])
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([rfd], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(rfd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size <= VERDICT_LIMIT:
                chunks.append(chunk)
    finally:
        os.close(rfd)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    qid = str(item["request"].get("question", ""))[:40]
    if timed_out:
        return {"ok": False, "message": f"{qid}: judging this answer took more than "
                                        f"{limits['wall_s']:g} s (the limit per answer)"}
    try:
        out = json.loads(b"".join(chunks).decode())
        if isinstance(out, dict) and isinstance(out.get("ok"), bool):
            return out
    except ValueError:
        pass
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGXCPU, signal.SIGKILL):
        return {"ok": False, "message": f"{qid}: judging this answer took more than "
                                        f"{limits['cpu_s']:g} s of CPU (the limit per answer)"}
    return {"ok": False, "message": f"{qid}: {GRADER_ERROR} (its judge stopped: {status})"}


def worker_main() -> int:
    """Read one JSON item per line on stdin, write one verdict per line on stdout."""
    from .verdicts import warm_up

    warm_up()
    for line in sys.stdin:
        try:
            job = json.loads(line)
            out = judge_one(job["item"], dict(LIMITS, **job.get("limits", {})))
        except Exception as exc:   # never leave the grader waiting for a line
            out = {"ok": False, "message": f"{GRADER_ERROR} ({type(exc).__name__})"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


class JudgePool:
    """Judging workers for one grading run: a thread takes one, judges, gives it back."""

    def __init__(self, limits=None, env=None):
        self.limits = dict(LIMITS, **(limits or {}))
        self.env = env
        self._free, self._all, self._lock = [], [], threading.Lock()

    def prestart(self, n: int) -> None:
        """Start ``n`` workers now, so their imports overlap the first notebooks' runs."""
        procs = [self._start() for _ in range(max(0, n))]
        with self._lock:
            self._all += procs
            self._free += procs

    def _start(self):
        env = dict(os.environ if self.env is None else self.env)
        return subprocess.Popen([sys.executable, "-m", "gpumemlab.classroom.judge_pool"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                text=True, encoding="utf-8", errors="backslashreplace")

    def judge(self, request: dict, reply, seed: str, who: str = "") -> tuple:
        """-> (passed, one-line message); never raises for what the answer holds. ``who``
        names the student in the teacher's log (the seed, maybe secret, never appears)."""
        item = {"request": request, "reply": reply, "seed": seed, "who": who}
        try:
            size = len(json.dumps(reply))
            limits = dict(self.limits)
            for key, value in SLOW_JUDGES.get(request.get("question"), {}).items():
                limits[key] = max(limits[key], value)
            line = json.dumps({"item": item, "limits": limits})
        except (ValueError, TypeError, RecursionError):
            return False, f"{request['question']}: the answer cannot be read back as data"
        if size > ANSWER_LIMIT:
            return False, (f"{request['question']}: the answer is larger than "
                           f"{ANSWER_LIMIT >> 10} KiB, more than any question needs")
        with self._lock:
            proc = self._free.pop() if self._free else None
        if proc is None or proc.poll() is not None:
            proc = self._start()
            with self._lock:
                self._all.append(proc)
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            answer = proc.stdout.readline()
            out = json.loads(answer)
        except (OSError, ValueError):
            proc.kill()
            return False, GRADER_ERROR
        with self._lock:
            self._free.append(proc)
        return bool(out.get("ok")), _clean(out.get("message", ""))

    def close(self):
        with self._lock:
            procs, self._all, self._free = self._all, [], []
        for proc in procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    sys.exit(worker_main())

"""``gpumemlab plan [--total-memory SIZE] [--host-memory SIZE] [--alloc-conf CONF] [--context SIZE]
[--arch sm80|sm90] [--time-limit SECONDS] [--json] SCRIPT.py [ARGS...]``: run an unmodified training or profiling script on fake CUDA tensors against a
simulated card and say whether it fits.

The script runs in a fresh Python process (``gpumemlab.planner.script``: the fake-CUDA library has
to be loaded before torch), in the current directory, with its own arguments. Its output is shown
as it runs (on stderr with ``--json``, so that stdout is the JSON alone), under a progress line
on a terminal (``--quiet``: none). Exit status 0 when the script ran and the step fits, 1 when it
ran and does NOT fit the card or the ``--host-memory`` budget for pinned host memory (like
``verify``'s 1: the answer is no; the output says which budget failed), 2 for input that cannot be planned
or a script that stopped early (its own error, a non-zero exit, the time limit).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from gpumemlab.cli import CLIError
from gpumemlab.cli.progress import add_quiet, ticker
from gpumemlab.planner.plan import CUDA_CONTEXT_BYTES
from gpumemlab.planner.time_limit import DEFAULT_TIME_LIMIT
from gpumemlab.units import format_size, parse_size


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="will a script fit on a card? (runs it on fake CUDA tensors)",
        description="Run an unmodified PyTorch script on fake CUDA tensors (no GPU, no memory) "
                    "against a simulated card: peak allocated and reserved, fits or not.")
    p.add_argument("--total-memory", metavar="SIZE", default="80GiB",
                   help="the card's size (default 80GiB)")
    p.add_argument("--host-memory", metavar="SIZE", default=None,
                   help="pinned host memory the script may use (pin_memory, save_on_cpu): the "
                        "host allocator's rounding counted; default no host budget")
    p.add_argument("--alloc-conf", metavar="CONF", default="",
                   help="PYTORCH_CUDA_ALLOC_CONF for the simulated allocator")
    p.add_argument("--context", metavar="SIZE", default=str(CUDA_CONTEXT_BYTES),
                   help=f"CUDA context estimate held outside the allocator "
                        f"(default {format_size(CUDA_CONTEXT_BYTES)})")
    p.add_argument("--arch", choices=("sm80", "sm90"), default="sm80",
                   help="the card's generation: its cuBLAS workspace size (8 MiB + 128 KiB before "
                        "Hopper, 32 MiB + 128 KiB on sm90) and get_device_capability()")
    p.add_argument("--time-limit", metavar="SECONDS", type=float, default=DEFAULT_TIME_LIMIT,
                   help=f"stop the script after this long and say where it was (default "
                        f"{DEFAULT_TIME_LIMIT} s; 0: no limit)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_quiet(p)
    p.add_argument("script", help="the Python script to run")
    p.add_argument("args", nargs="...", help="the script's own arguments")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args) -> int:
    try:
        total = parse_size(args.total_memory, name="--total-memory")
        context = parse_size(args.context, name="--context")
        host_memory = (None if args.host_memory is None
                       else parse_size(args.host_memory, name="--host-memory"))
    except (TypeError, ValueError) as exc:
        raise CLIError(str(exc)) from None
    if context >= total:
        raise CLIError(f"--context ({format_size(context)}) leaves nothing of the card "
                       f"({format_size(total)})")
    if not os.path.isfile(args.script):
        raise CLIError(f"{args.script}: no such script")
    try:
        from gpumemlab.allocator import AllocatorConfig
        AllocatorConfig.parse(args.alloc_conf)
    except ValueError as exc:
        raise CLIError(f"--alloc-conf {args.alloc_conf!r}: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="gpumemlab-plan-") as tmp:
        out = os.path.join(tmp, "result.json")
        config = {"total_memory": total, "alloc_conf": args.alloc_conf, "context_bytes": context,
                  "arch": args.arch, "result": out, "host_memory": host_memory,
                  "time_limit": args.time_limit or None,
                  "started": os.path.join(tmp, "started")}
        cmd = [sys.executable, "-m", "gpumemlab.planner.script", json.dumps(config),
               args.script, *args.args]
        env = dict(os.environ)
        pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
        with ticker(args, f"plan: running {os.path.basename(args.script)}") as tick:
            # the process stops the script at the limit itself; past that and a grace for
            # writing the result (a script stuck inside one C call), it is ended from here
            hard = args.time_limit + KILL_GRACE_S if args.time_limit else None
            try:
                returncode = _run_script(cmd, env, sys.stderr if args.json else sys.stdout, tick,
                                         hard, config["started"])
            except subprocess.TimeoutExpired:
                raise CLIError(f"the script ran past the time limit of {args.time_limit:g} s "
                               f"and did not stop there (inside one long call?); the planning "
                               f"process was ended {KILL_GRACE_S} s later, without a result") \
                    from None
        if not os.path.exists(out):
            raise CLIError(f"the planning process ended without a result (exit status "
                           f"{returncode})")
        with open(out, encoding="utf-8") as f:
            result = json.load(f)
    if result.get("error") and "peak_allocated_bytes" not in result:
        raise CLIError(result["error"])
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(_text(result))
    if result.get("error"):
        print(f"gpumemlab plan: the script stopped early: {result['error']}", file=sys.stderr)
        return 2
    return 0 if result["fits"] else 1


KILL_GRACE_S = 120


def _watch(proc, timeout, started, fired):
    """Kill ``proc`` once ``timeout`` seconds have passed since the script started (the file
    ``started`` the planning process writes then: torch's import before it is not counted)."""
    import time
    while proc.poll() is None:
        try:
            late = time.time() - os.path.getmtime(started) > timeout
        except OSError:
            late = False
        if late:
            fired.append(True)
            proc.kill()
            return
        time.sleep(1.0)


def _run_script(cmd, env, out, tick, timeout=None, started=None) -> int:
    """Run the planning process, its output shown as it comes: straight to the terminal, or,
    under a progress line, line by line above it (unbuffered, so that it is not held back).
    Past ``timeout`` seconds after the script started it is killed
    (``subprocess.TimeoutExpired``)."""
    import threading
    piped = tick.on
    if piped:
        env = dict(env, PYTHONUNBUFFERED="1")
    kw = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace") \
        if piped else dict(stdout=out if out is sys.stderr else None)
    fired = []
    with subprocess.Popen(cmd, env=env, **kw) as proc:
        if timeout:
            threading.Thread(target=_watch, args=(proc, timeout, started, fired),
                             daemon=True).start()
        if piped:
            for line in proc.stdout:
                tick.line(line, out)
        proc.wait()
    if fired:
        raise subprocess.TimeoutExpired(cmd, timeout)
    return proc.returncode


def _failed(r: dict) -> str:
    """Which budgets failed: the card (the first allocation that ran out), the host."""
    out = []
    if r.get("oom") is not None:
        out.append(f"device budget: the first allocation that ran out asked for "
                   f"{format_size(r['oom']['size'])}")
    if "host" in (r.get("failed") or []):
        out.append(f"host budget: pins {format_size(r['host']['pinned_peak_bytes'])} of "
                   f"{format_size(r['host_memory_bytes'])}")
    return "; ".join(out)


def _text(r: dict) -> str:
    if r["fits"] is None:
        verdict = "not known: the script stopped before the end (the peaks are up to there)"
        if r.get("exit_status"):
            verdict += f"; exit status {r['exit_status']}"
    else:
        verdict = "fits" if r["fits"] else "does NOT fit: " + _failed(r)
    lines = [f"{r['script']} on a {format_size(r['total_memory_bytes'])} simulated card "
             f"({r['traced_on']}, torch {r['torch_version']})",
             f"window: {r['window']}",
             f"peak allocated {format_size(r['peak_allocated_bytes'])}, peak reserved "
             f"{format_size(r['peak_reserved_bytes'])}: {verdict}"]
    host = r.get("host") or {}
    if host.get("pinned_requests") or r.get("host_memory_bytes") is not None:
        budget = ("no host budget" if r.get("host_memory_bytes") is None
                  else f"host budget {format_size(r['host_memory_bytes'])}")
        lines.append(f"pinned host memory: {host.get('pinned_requests', 0)} requests of "
                     f"{format_size(host.get('requested_bytes', 0))} pin "
                     f"{format_size(host.get('pinned_peak_bytes', 0))} at the peak (rounded and "
                     f"cached as CachingHostAllocator does), {budget}")
    lines.append("not seen by fake tensors:")
    for n in r["not_seen"]:
        est = "" if n["estimate_bytes"] is None else f" {format_size(n['estimate_bytes'])}"
        lines.append(f"  {n['what']}:{est} ({n['how']})")
    return "\n".join(lines)

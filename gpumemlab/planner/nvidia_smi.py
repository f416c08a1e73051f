"""``nvidia-smi`` answering from the simulated card while ``gpumemlab plan`` runs a script.

Scripts ask the driver's tool how full the card is (``subprocess.check_output(["nvidia-smi",
"--query-gpu=memory.used", "--format=csv,nounits,noheader"])``, a bare ``nvidia-smi`` printed
after a step). On the planning machine there is no such tool, or it shows another card. So for the
duration of ``fake_nvidia_smi(card)`` a folder holding an executable ``nvidia-smi`` is put first on
``PATH``; it runs ``main`` below in a small process of its own (no torch). A child process cannot
see the planning process's card, so when the script starts a process whose command names
``nvidia-smi`` (the audit events ``subprocess.Popen``, ``os.system``, ``os.posix_spawn``,
``os.exec``, PEP 578) the card is fed what the capture recorded so far and its figures are written
to a file beside the executable, which the child reads.

Answered as the driver's tool reports them (``nvidia-smi --help-query-gpu``): ``memory.total``,
``memory.used`` (everything held on the card: the CUDA context estimate and what the caching
allocator reserved, ``total - free`` of ``torch.cuda.mem_get_info``), ``memory.free``, ``index``,
``name``/``gpu_name``, ``count``, ``driver_version``/``uuid``/``pci.bus_id`` (``[N/A]``: there
is no driver); ``--query-compute-apps=pid,process_name,used_memory``; ``--format=csv`` with
``noheader``/``nounits``; ``-i``/``--id``; ``-L``; ``-q`` (``-d MEMORY``); and the default
table, its Memory-Usage column ``USEDMiB / TOTALMiB``. Anything else (another field, ``-l`` loops,
``dmon``) is not answered: one line on stderr saying so, exit status 2, as nvidia-smi exits for a
field it does not know.
"""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import tempfile

__all__ = ["fake_nvidia_smi", "main"]

_state = {"on": False, "hooked": False, "card": None, "file": None}

_EVENTS = ("subprocess.Popen", "os.system", "os.posix_spawn", "os.exec")
MIB = 1 << 20


def _figures(card) -> dict:
    card.sync()
    free, total = card.gpu.mem_get_info()
    return {"total": total, "used": total - free, "free": free, "pid": os.getpid(),
            "process": os.path.basename(sys.executable), "name": card.gpu.name}


def _hook(event, args):
    if not _state["on"] or event not in _EVENTS or "nvidia-smi" not in repr(args):
        return
    with open(_state["file"], "w", encoding="utf-8") as f:
        json.dump(_figures(_state["card"]), f)


@contextlib.contextmanager
def fake_nvidia_smi(card):
    """``nvidia-smi`` on ``PATH`` answering from ``card`` (a ``LiveCard``) for the duration."""
    if not _state["hooked"]:
        sys.addaudithook(_hook)
        _state["hooked"] = True
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with tempfile.TemporaryDirectory(prefix="gpumemlab-smi-") as folder:
        state = os.path.join(folder, "card.json")
        code = (f"import sys; sys.path.insert(0, {root!r}); "
                f"from gpumemlab.planner.nvidia_smi import main; sys.exit(main(sys.argv[1:]))")
        exe = os.path.join(folder, "nvidia-smi")
        with open(exe, "w", encoding="utf-8") as f:
            f.write(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -E -S -c {shlex.quote(code)} "
                    f"{shlex.quote(state)} \"$@\"\n")
        os.chmod(exe, 0o755)
        old_path = os.environ.get("PATH")
        os.environ["PATH"] = folder + os.pathsep + (old_path or "")
        _state.update(on=True, card=card, file=state)
        with open(state, "w", encoding="utf-8") as f:
            json.dump(_figures(card), f)
        try:
            yield exe
        finally:
            _state.update(on=False, card=None)
            if old_path is None:
                os.environ.pop("PATH", None)
            else:
                os.environ["PATH"] = old_path


# --- the child: nvidia-smi itself ---------------------------------------------------------------

def _gpu_field(name: str, s: dict, units: bool):
    """(header, value) of one ``--query-gpu`` field, or None where it is not answered."""
    mib = {"memory.total": s["total"], "memory.used": s["used"], "memory.free": s["free"]}
    if name in mib:
        return f"{name} [MiB]", f"{mib[name] // MIB}" + (" MiB" if units else "")
    plain = {"index": "0", "count": "1", "name": s["name"], "gpu_name": s["name"],
             "driver_version": "[N/A]", "uuid": "[N/A]", "gpu_uuid": "[N/A]",
             "pci.bus_id": "[N/A]", "gpu_bus_id": "[N/A]"}
    return (name, plain[name]) if name in plain else None


def _app_field(name: str, s: dict, units: bool):
    if name in ("used_memory", "used_gpu_memory"):
        return f"{name} [MiB]", f"{s['used'] // MIB}" + (" MiB" if units else "")
    plain = {"pid": str(s["pid"]), "process_name": s["process"], "name": s["process"],
             "gpu_name": s["name"], "gpu_uuid": "[N/A]", "gpu_bus_id": "[N/A]"}
    return (name, plain[name]) if name in plain else None


def _csv(fields: list, s: dict, fmt: set, of) -> str:
    units = "nounits" not in fmt
    cells = [of(f.strip(), s, units) for f in fields if f.strip()]
    if None in cells:
        missing = [f.strip() for f, c in zip(fields, cells) if c is None]
        raise _NotAnswered(f'field "{missing[0]}" of the query')
    lines = [] if "noheader" in fmt else [", ".join(h for h, _ in cells)]
    return "\n".join(lines + [", ".join(v for _, v in cells)]) + "\n"


def _table(s: dict) -> str:
    used, total = s["used"] // MIB, s["total"] // MIB
    bar = "+" + "-" * 31 + "+" + "-" * 22 + "+" + "-" * 22 + "+"
    usage = f"{used}MiB / {total}MiB"
    rows = [bar, f"{'| NVIDIA-SMI (gpumemlab plan: the simulated card)':<78}|", bar,
            "| GPU  Name                     | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
            "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |",
            "|" + "=" * 31 + "+" + "=" * 22 + "+" + "=" * 22 + "|",
            f"|   0  {s['name'][:24]:<24} | {'N/A':<12}     N/A | {'N/A':>20} |",
            f"| N/A   N/A   N/A    N/A /  N/A | {usage:>20} | {'N/A      Default':>20} |",
            bar, "", "+" + "-" * 77 + "+",
            f"| Processes:{' ' * 66}|",
            f"{'|  GPU   PID   Type   Process name':<67}GPU Memory |",
            "|" + "=" * 77 + "|",
            f"|    0 {s['pid']:>7}    C   {s['process'][:40]:<40} {str(used) + 'MiB':>13} |",
            "+" + "-" * 77 + "+"]
    return "\n".join(rows) + "\n"


def _query(s: dict) -> str:
    return ("\n==============NVSMI LOG==============\n\nAttached GPUs"
            f"{' ' * 29}: 1\nGPU 00000000:00:00.0\n    Product Name{' ' * 22}: {s['name']}\n"
            f"    FB Memory Usage\n        Total{' ' * 25}: {s['total'] // MIB} MiB\n"
            f"        Used{' ' * 26}: {s['used'] // MIB} MiB\n"
            f"        Free{' ' * 26}: {s['free'] // MIB} MiB\n")


class _NotAnswered(Exception):
    pass


def _options(argv: list) -> dict:
    """``--name=value``, ``--name value``, ``-i 0``, flags; an option not known raises."""
    takes = {"--query-gpu", "--query-compute-apps", "--format", "-i", "--id", "-d", "--display"}
    flags = {"-q", "--query", "-L", "--list-gpus"}
    out, i = {}, 0
    while i < len(argv):
        a = argv[i]
        name, eq, value = a.partition("=")
        if name in takes:
            if not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            out[name] = value
        elif a in flags:
            out[a] = True
        else:
            raise _NotAnswered(f"option {a!r}")
        i += 1
    return out


def answer(argv: list, s: dict) -> str:
    o = _options(argv)
    if o.get("-i", o.get("--id", "0")) not in ("0", "00000000:00:00.0"):
        raise _NotAnswered("a GPU other than 0 (the simulated card is the only one)")
    fmt = {p.strip() for p in o.get("--format", "csv").split(",")}
    if "--query-gpu" in o:
        return _csv(o["--query-gpu"].split(","), s, fmt, _gpu_field)
    if "--query-compute-apps" in o:
        return _csv(o["--query-compute-apps"].split(","), s, fmt, _app_field)
    if o.get("-L") or o.get("--list-gpus"):
        return f"GPU 0: {s['name']} (UUID: N/A)\n"
    if o.get("-q") or o.get("--query"):
        shown = o.get("-d", o.get("--display", "MEMORY")).upper()
        if shown not in ("MEMORY",):
            raise _NotAnswered(f"-d {shown}")
        return _query(s)
    return _table(s)


def main(args: list) -> int:
    with open(args[0], encoding="utf-8") as f:
        s = json.load(f)
    try:
        sys.stdout.write(answer(args[1:], s))
    except _NotAnswered as exc:
        sys.stderr.write(f"gpumemlab plan's nvidia-smi answers memory.total/used/free, the default "
                         f"table, -q -d MEMORY and -L from the simulated card; {exc} is not "
                         f"answered\n")
        return 2
    return 0

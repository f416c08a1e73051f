"""Run an unmodified Python script on fake CUDA tensors against a simulated card (``gpumemlab plan``).

``python -m gpumemlab.planner.script CONFIG_JSON SCRIPT.py [ARGS...]`` is started by the CLI in a
fresh process, because the fake-CUDA library must be loaded before torch (``fake_cuda.preload``).
The script runs as ``python SCRIPT.py ARGS`` would (``__main__``, ``sys.argv``, its directory first
on ``sys.path``, the caller's working directory) inside ``gml.capture(fake=..., device="cuda")``,
with ``torch.cuda`` and ``nvidia-smi`` answering from a ``LiveCard`` (``cuda_shim.py``,
``nvidia_smi.py``), offline (``offline.py``), under a time limit (``time_limit.py``). When it ends, the result is
written as JSON to the path in CONFIG_JSON's ``"result"``: peak allocated and reserved over the
window, the card, fits, the window, what fake tensors do not see, the first OOM, the script's exit
status, or one line of error.
"""
from __future__ import annotations

import json
import os
import sys
import time

from gpumemlab.recordings import fake_cuda
from gpumemlab.recordings.capture import CUBLAS_WORKSPACE_BYTES

__all__ = ["run_script"]


# capability, and c10's cuBLAS workspace size (getChosenWorkspaceSize): Hopper's is 4x bigger
ARCH = {"sm80": ((8, 0), CUBLAS_WORKSPACE_BYTES), "sm90": ((9, 0), 4096 * 8 * 1024 + 16 * 1024 * 8)}


def run_script(script: str, argv: list, *, total_memory: int, alloc_conf: str = "",
               context_bytes: int, arch: str = "sm80", host_memory: int | None = None,
               time_limit_s: float | None = None, started_file: str | None = None) -> dict:
    """Run ``script`` with ``argv`` on fake CUDA tensors (the library must be preloaded).
    ``host_memory``: a budget for the pinned host memory the script asks for (None: none);
    ``time_limit_s``: stop it after that many seconds (``time_limit.py``; None or 0: never)."""
    import runpy

    import torch

    from gpumemlab.recordings.capture import capture
    from gpumemlab.recordings.fake import explain, fake_tensors

    from .checkpoints import checkpoints
    from .compile_eager import eager_compile
    from .cuda_shim import DEVICE_NAME, cuda_shim
    from .live_card import LiveCard
    from .nvidia_smi import fake_nvidia_smi
    from .offline import describe, hint, offline
    from .time_limit import PlanTimeLimit, limit_line, time_limit
    from .plan import NOT_SEEN

    from .script_mode import ScriptFakeMode, data_factories_on_cpu, formatted_scalars
    mode = ScriptFakeMode(alloc_conf)
    fs = fake_tensors("cuda", mode=mode)
    capability, workspace = ARCH[arch]
    rec = capture(fake=fs, device="cuda", frames=False, workspace_bytes=workspace)
    card = LiveCard(rec, total_memory, alloc_conf, context_bytes)
    old_argv, old_path = sys.argv[:], sys.path[:]
    sys.argv = [script] + list(argv)
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    import warnings
    # torch's warnings about the fake set-up itself, not the script: a CPU-only torch has no
    # cuDNN (RNNs take the fused-cell path), deep copies of kept checkpoints read data_ptr
    warnings.filterwarnings("ignore", message="PyTorch was compiled without cuDNN")
    warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
    status, error, stopped_at = 0, None, None
    compiled, refused, clock = {"calls": 0}, [], {"start": time.monotonic()}
    try:
        with offline() as refused, cuda_shim(card, capability), fake_nvidia_smi(card), \
                checkpoints(), \
                eager_compile() as compiled, data_factories_on_cpu(), formatted_scalars(), rec, \
                time_limit(mode, time_limit_s, started_file) as clock:
            runpy.run_path(script, run_name="__main__")
    except PlanTimeLimit as exc:   # ours, not the script's: where it was, and how far it got
        status, stopped_at = 1, _stopped_at(exc, script)
        error = limit_line(time_limit_s, mode.ops, time.monotonic() - clock["start"],
                           _at(stopped_at))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if status:                 # a non-zero exit is the script's own verdict: it stopped
            stopped_at = _stopped_at(exc, script)
            error = (describe(refused) + _at(stopped_at) + hint(refused) if refused
                     else _exit_error(exc, status) + _at(stopped_at))
    except Exception as exc:       # one line, and the script's frame where it stopped
        status, stopped_at = 1, _stopped_at(exc, script)
        if refused:                # whatever it raised, the cause was the refused download
            error = describe(refused) + _at(stopped_at) + hint(refused)
        else:
            error = explain(exc) if _fake_side(exc) else _own_error(exc, stopped_at)
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    peak_a, peak_r, window = card.window_figures()
    not_seen = [{"what": "CUDA context", "estimate_bytes": context_bytes,
                 "how": "held outside the allocator on the simulated card (other_memory)"}]
    not_seen += [{"what": e["estimate"], "estimate_bytes": e["size"],
                  "how": "added at the thread's first matrix multiply"}
                 for e in rec.trace if e.get("estimate")]
    not_seen += [{"what": w, "estimate_bytes": None, "how": "not seen"} for w in NOT_SEEN]
    if compiled["calls"]:
        not_seen.append({"what": f"torch.compile ({compiled['calls']} calls): planned eagerly",
                         "estimate_bytes": None,
                         "how": "inductor's fused kernels usually hold fewer temporaries than the "
                                "eager step planned here; its CUDA-graph pools are not seen"})
    if refused and not error:
        not_seen.append({"what": f"network refused ({len(refused)} attempts, first "
                                 f"{refused[0]}): the script went on without it",
                         "estimate_bytes": None, "how": "the planner runs offline"})
    if mode.placeholder_reads:
        not_seen.append({"what": f"values read from GPU tensors ({mode.placeholder_reads} reads: "
                                 f".item(), float(), bool())", "estimate_bytes": None,
                         "how": "answered 0 (fake tensors hold no values): a script that "
                                "branches on them took the path 0 gives"})
    host = mode.host.figures()
    failed = ["device"] if card.oom is not None else []
    if host_memory is not None and host["pinned_peak_bytes"] > host_memory:
        failed.append("host")
    fits = _fits(card.oom, error)
    return {
        "host": host, "host_memory_bytes": host_memory, "failed": failed,
        "script": script, "argv": list(argv), "traced_on": fs.label, "device_name": DEVICE_NAME,
        "torch_version": torch.__version__, "arch": arch,
        "peak_allocated_bytes": peak_a, "peak_reserved_bytes": peak_r,
        "total_memory_bytes": total_memory, "context_bytes": context_bytes,
        "alloc_conf": alloc_conf, "fits": False if failed else fits, "oom": card.oom, "stopped_at": stopped_at,
        "whole_run_peak_allocated_bytes": card.peak[0],
        "whole_run_peak_reserved_bytes": card.peak[1], "window": window,
        "trace_entries": len(rec.trace), "not_seen": not_seen, "exit_status": status,
        "error": error, "placeholder_reads": mode.placeholder_reads,
        "network_refused": list(dict.fromkeys(refused))[:10],
        "time_limit_s": time_limit_s or None, "operators": mode.ops,
    }


def _fits(oom, error):
    """False once an allocation ran out; None when the script stopped before the end for another
    reason (the peaks are partial, so nothing is known); True when it ran to the end."""
    if oom is not None:
        return False
    return None if error else True


def _fake_side(exc) -> bool:
    """Did fake tensors (not the script) fail? Their own exceptions, an op with no kernel for the
    fake device, or a value read from a fake tensor."""
    mod = type(exc).__module__ or ""
    msg = str(exc)
    return (mod.startswith("torch._subclasses") or mod.startswith("torch.fx")
            or type(exc).__name__ in ("DataDependentOutputException", "UnsupportedOperatorException",
                                      "DynamicOutputShapeException", "GuardOnDataDependentSymNode")
            or (isinstance(exc, NotImplementedError) and "backend" in msg)
            or "FakeTensor" in msg or "fake tensor" in msg.lower()
            or ("hasPrimaryContext" in msg and fake_cuda.no_cuda_device()))


def _stopped_at(exc, script):
    """The last frame of the traceback in the script's own code (its folder, not torch or this
    kit), else the last frame: {"file", "line", "function"}."""
    import traceback
    frames = traceback.extract_tb(exc.__traceback__)
    here = os.path.dirname(os.path.abspath(script))
    own = [f for f in frames if os.path.abspath(f.filename).startswith(here + os.sep)
           and "site-packages" not in f.filename]
    f = (own or frames or [None])[-1]
    return None if f is None else {"file": f.filename, "line": f.lineno, "function": f.name}


def _at(where) -> str:
    return f" at {os.path.basename(where['file'])}:{where['line']} in {where['function']}" \
        if where else ""


def _exit_error(exc, status) -> str:
    """``sys.exit(1)``, ``sys.exit("message")``, ``raise SystemExit(2)``: the status, and the
    message where it gave one (Python prints it and exits 1)."""
    said = f" ({str(exc.code).strip().splitlines()[0][:200]})" \
        if isinstance(exc.code, str) and str(exc.code).strip() else ""
    return f"the script exited with status {status}{said}"


def _own_error(exc, where) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    said = f": {msg[:240]}" if msg else ""
    return f"the script raised {type(exc).__name__}{said}{_at(where)}"


def main(args: list) -> int:
    config = json.loads(args[0])
    script, argv = args[1], args[2:]
    if not fake_cuda.preload():
        result = {"error": f"fake CUDA tensors are not available: {fake_cuda.status()['reason']}. "
                           f"Without them the planner can still plan a model in Python: "
                           f"gml.plan(..., device='cpu') traces fake CPU tensors counted as the "
                           f"GPU (labelled so)"}
    else:
        result = run_script(script, argv, total_memory=config["total_memory"],
                            alloc_conf=config.get("alloc_conf", ""),
                            context_bytes=config["context_bytes"],
                            arch=config.get("arch", "sm80"),
                            host_memory=config.get("host_memory"),
                            time_limit_s=config.get("time_limit"),
                            started_file=config.get("started"))
    with open(config["result"], "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

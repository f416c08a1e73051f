"""``gml.plan``: will a model's training or inference step fit on a card, and what makes it fit.

The step is traced at full size on fake tensors (``trace.py``: no memory is allocated) and the trace
replayed on the allocator model (``gml.replay``) with the card's capacity, less an estimate of the
CUDA context (``CUDA_CONTEXT_BYTES``, memory the driver holds outside the caching allocator). From
that one replay: peak allocated and reserved per step (the optimizer state arrives in step 2; the
first step is not the second), bytes by category at the peak, fits or not and by how much. Then,
each verified by its own trace and replay: the largest batch that fits (doubling, then a binary
search), the smallest card (``doctor.search.smallest_card``), the levers (mixed precision,
activation checkpointing of every block and of every other block, gradient accumulation at the same
effective batch, optimizer-state offload and, on fake CUDA tensors, the offload of saved tensors to
the host, each with its pinned host bytes, bytes moved and copy time: ``offload.py``) and the
allocator settings the doctor searches. Beside it, the rules of thumb (``crosscheck.py``).
``host_memory`` is a host budget for pinned memory: a plan (or lever) whose pinned bytes exceed it
does not fit, and ``Plan.failed`` names the budget that failed ("device", "host").

What fake tensors cannot see is listed in ``Plan.not_seen``, with the estimates used.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from gpumemlab.doctor.search import search_settings, smallest_card
from gpumemlab.recordings.replay import replay
from gpumemlab.recordings.replay.prepare import UNLIMITED_BYTES
from gpumemlab.units import format_size, parse_size

from .crosscheck import crosscheck
from .figures import by_category_at_peak, peak_live, per_step
from .offload import LINK_SOURCES, copy_ms, live_sizes, pinned_total, without_category
from .trace import Config, Setup, StepFailed, blocks_of, trace, with_

__all__ = ["plan", "Plan", "Option", "CUDA_CONTEXT_BYTES", "StepFailed", "NOT_SEEN"]

MiB = 1 << 20
# What the CUDA context (driver, kernels' modules) takes on the card, outside the allocator: a few
# hundred MiB, depending on the driver, the GPU and lazy module loading; an estimate, pass your own
# (torch.cuda.mem_get_info() after the first kernel, minus memory_reserved(), measures it).
CUDA_CONTEXT_BYTES = 512 * MiB

NOT_SEEN = [
    "buffers kernels allocate inside themselves (reduction staging, cuDNN/cuBLASLt scratch beyond "
    "the cuBLAS workspace)",
    "NCCL and other communication buffers (multi-GPU)",
    "memory other processes hold on the card",
]


@dataclass
class Option:
    """One configuration, traced and replayed: a batch size, a lever or an allocator setting."""

    name: str
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    fits: bool | None
    extra_compute: float = 0.0          # extra floating-point operations, a fraction of the base
    transfer_bytes: int = 0             # bytes over the link per step, both ways (offload)
    note: str = ""
    pareto: bool = False
    host_pinned_bytes: int = 0          # pinned host memory it holds (offload), rounded per tensor
    failed: list = field(default_factory=list)   # the budgets it does not fit: device, host


@dataclass
class Plan:
    """What ``plan`` found; ``report()`` prints it, ``as_dict()`` gives it as JSON-ready data."""

    label: str
    config: Config
    total_memory_bytes: int
    context_bytes: int
    alloc_conf: str
    params: int
    steps: list
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    fits: bool
    shortfall_bytes: int
    by_category: dict
    largest_batch: int | None = None
    smallest_card_bytes: int | None = None
    levers: list = field(default_factory=list)
    settings: list = field(default_factory=list)
    crosscheck: dict | None = None
    not_seen: list = field(default_factory=list)
    capture: object = None
    offload: str | None = None
    host_memory_bytes: int | None = None
    host_pinned_bytes: int = 0
    transfer_bytes: int = 0
    failed: list = field(default_factory=list)
    assumptions: list = field(default_factory=list)
    host_note: str = ""

    @property
    def capacity_bytes(self) -> int:
        return self.total_memory_bytes - self.context_bytes

    def as_dict(self) -> dict:
        from .report import plan_dict
        return plan_dict(self)

    def report(self) -> str:
        from .report import plan_text
        return plan_text(self)

    def __repr__(self):
        from gpumemlab.units import format_size
        return (f"<Plan {self.config.label()}: peak reserved {format_size(self.peak_reserved_bytes)}"
                f" on {format_size(self.total_memory_bytes)}: {'fits' if self.fits else 'does not fit'}>")


OFFLOADS = ("activations", "optimizer")


def _run(setup, config, conf, capacity, offload=None):
    """Trace and replay one configuration: (capture, result at capacity, result for the figures,
    offload figures, what was replayed). With ``offload="optimizer"`` the replay leaves out the
    optimizer state (it lives on the host)."""
    rec = trace(setup, with_(config, offload=offload == "activations"))
    source, host = rec, _host_cost(rec, offload, conf)
    if offload == "optimizer":
        source = without_category(rec.trace, "optimizer_state")
    r = replay(source, alloc_conf=conf, total_memory=capacity)
    if r.oom is None:
        return rec, r, r, host, source
    return rec, r, replay(source, alloc_conf=conf, total_memory=UNLIMITED_BYTES), host, source


def _host_cost(rec, offload, conf) -> dict:
    """Pinned host bytes, bytes moved per step and copy time of ``offload`` on this trace."""
    if offload == "activations":
        pinned = pinned_total(rec.offload_saved_sizes, conf)
        moved = rec.offload_bytes_per_step
        out = [moved, moved]                 # out in forward, back in backward
        what = f"{len(rec.offload_saved_sizes)} saved tensors, each pinned on its own"
    elif offload == "optimizer":
        states = live_sizes(rec.trace, "optimizer_state")
        pinned = pinned_total(states, conf)
        out = [sum(live_sizes(rec.trace, "gradient")), sum(live_sizes(rec.trace, "parameter"))]
        what = f"{len(states)} state tensors pinned; gradients out, parameters back each step"
    else:
        return {"pinned": 0, "moved": 0, "note": ""}
    times = ", ".join(f"{t:.1f} ms at {name}" for name, t in copy_ms(sum(out)).items())
    return {"pinned": pinned, "moved": sum(out),
            "note": f"{what}: pins {format_size(pinned)}, moves {format_size(sum(out))} per "
                    f"step ({times})"}


def _budgets(at_cap, host, host_memory) -> list:
    failed = [] if at_cap.oom is None else ["device"]
    if host_memory is not None and host["pinned"] > host_memory:
        failed.append("host")
    return failed


def _option(name, setup, config, conf, capacity, base_ops, note="", offload=None,
            host_memory=None):
    try:
        rec, at_cap, full, host, _ = _run(setup, config, conf, capacity, offload)
    except StepFailed as exc:
        return Option(name, None, None, None, note=str(exc))
    failed = _budgets(at_cap, host, host_memory)
    return Option(name, full.peak_allocated, full.peak_reserved, not failed,
                  extra_compute=(rec.flops - base_ops) / base_ops if base_ops else 0.0,
                  note="; ".join(n for n in (note, host["note"]) if n), transfer_bytes=host["moved"],
                  host_pinned_bytes=host["pinned"], failed=failed)


def plan(model, optimizer=None, inputs=None, *, total_memory="24GiB", alloc_conf: str = "",
         batch_size: int = 1, precision: str | None = None, checkpointing=None,
         accumulation: int = 1, steps: int = 3, loss=None, device: str = "auto",
         context_bytes: int = CUDA_CONTEXT_BYTES, workspace_bytes: int | None = None,
         levers: bool = True, largest_batch: bool = True, settings: bool = True,
         max_batch: int = 4096, dims: dict | None = None, offload: str | None = None,
         host_memory=None) -> Plan:
    """Plan ``steps`` steps of a model on a card of ``total_memory``.

    ``model``: an ``nn.Module`` (real or ``meta``: copied as fakes, untouched) or a function making
    one (run on fake tensors). ``optimizer``: ``params -> Optimizer`` (e.g.
    ``lambda p: torch.optim.AdamW(p)``), None for inference (``torch.no_grad``). ``inputs``: a
    shape tuple, batch first, or ``batch_size -> tensor(s)``. ``dims``: a transformer's
    ``layers/seq/hidden/heads`` for the activation formula (``gpumemlab.planner.models.gpt`` models carry it).
    ``device``: "cuda" (fake CUDA tensors; needs the library loaded before torch, as ``gpumemlab
    plan`` does), "cpu" (fake CPU tensors counted as the GPU), "auto". ``offload``: None,
    "activations" (save_on_cpu; fake CUDA tensors) or "optimizer" (states on the host).
    ``host_memory``: the pinned host memory the plan may use (None: no host budget).
    """
    if offload not in (None,) + OFFLOADS:
        raise ValueError(f"offload is one of {', '.join(OFFLOADS)} or None, not {offload!r}")
    if offload is not None and optimizer is None:
        raise ValueError("offload plans a training step: give an optimizer")
    host_budget = None if host_memory is None else parse_size(host_memory, name="host_memory")
    total = parse_size(total_memory, name="total_memory")
    context_bytes = parse_size(context_bytes, name="context_bytes")
    if context_bytes >= total:
        raise ValueError(f"context_bytes ({context_bytes}) leaves nothing of total_memory ({total})")
    capacity = total - context_bytes
    setup = Setup(model=model, optimizer=optimizer, inputs=inputs, loss=loss, device=device,
                  workspace_bytes=workspace_bytes)
    config = Config(batch_size=batch_size, precision=precision, checkpointing=checkpointing,
                    accumulation=accumulation, steps=steps)
    rec, at_cap, full, host, src = _run(setup, config, alloc_conf, capacity, offload)
    if offload == "activations" and rec.device != "cuda":
        raise ValueError("activation offload (save_on_cpu) moves CUDA tensors: plan it on fake "
                         "CUDA tensors (device='cuda')")
    failed = _budgets(at_cap, host, host_budget)
    fits = not failed
    cats = by_category_at_peak(src, full)
    p = Plan(label=rec.label, config=config, total_memory_bytes=total, context_bytes=context_bytes,
             alloc_conf=alloc_conf, params=rec.param_count, steps=per_step(src, full),
             peak_allocated_bytes=full.peak_allocated, peak_reserved_bytes=full.peak_reserved,
             fits=fits, shortfall_bytes=max(full.peak_reserved - capacity, 0),
             by_category=cats, capture=rec, offload=offload, host_memory_bytes=host_budget,
             host_pinned_bytes=host["pinned"], transfer_bytes=host["moved"], failed=failed)
    p.host_note = host["note"]
    p.assumptions = [f"{name}: {what}" for name, what in LINK_SOURCES.items()]
    p.not_seen = _not_seen(rec, context_bytes)
    base_ops = rec.flops
    if largest_batch:
        p.largest_batch = _largest_batch(setup, config, alloc_conf, capacity, max_batch, fits,
                                         offload, host_budget)
    card = smallest_card(src, alloc_conf, 0)
    p.smallest_card_bytes = None if card["bytes"] is None else card["bytes"] + context_bytes
    if levers:
        p.levers = _levers(setup, config, alloc_conf, capacity, base_ops, p, rec, host_budget)
    if settings:
        p.settings = _settings(src, alloc_conf, capacity)
    model_states = sum(cats.get(c, 0) for c in ("parameter", "gradient", "optimizer_state"))
    states_full = _states_total(rec)
    p.crosscheck = crosscheck(
        params=rec.param_count, weight_bytes=rec.weight_bytes, training=optimizer is not None,
        optimizer=rec.optimizer_name, momentum=rec.momentum, planned_peak=full.peak_allocated,
        planned_states=states_full or model_states, planned_activations=peak_live(rec, "activation"),
        dims=dims or rec.dims, batch=batch_size, precision=precision)
    return p


def _states_total(rec) -> int:
    """Parameters, gradients and optimizer state as they stand at the end of the trace."""
    return sum(sum(live_sizes(rec.trace, c)) for c in ("parameter", "gradient", "optimizer_state"))


def _largest_batch(setup, config, conf, capacity, max_batch, base_fits, offload=None,
                   host_memory=None):
    """The largest batch (a multiple of the accumulation) whose steps fit, each trial replayed."""
    unit = config.accumulation

    def fits(b):
        try:
            _, at_cap, _, host, _ = _run(setup, with_(config, batch_size=b * unit,
                                                      steps=min(config.steps, 2)),
                                         conf, capacity, offload)
            return not _budgets(at_cap, host, host_memory)
        except StepFailed:
            return False

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi * unit <= max_batch and fits(hi):
        lo, hi = hi, hi * 2
    if hi * unit > max_batch:
        return lo * unit
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo * unit


def _levers(setup, config, conf, capacity, base_ops, p, rec, host_memory=None):
    given = config.label() + (f", {p.offload} offloaded" if p.offload else "")
    base = Option(f"as given ({given})", p.peak_allocated_bytes, p.peak_reserved_bytes,
                  p.fits, transfer_bytes=p.transfer_bytes, host_pinned_bytes=p.host_pinned_bytes,
                  failed=list(p.failed), note=p.host_note)
    out = [base]
    same = {"offload": p.offload, "host_memory": host_memory}   # the other levers keep it
    if config.precision is None:
        out.append(_option("bf16 autocast", setup, with_(config, precision="bf16"), conf,
                           capacity, base_ops, "weights stay fp32; activations bf16", **same))
    n_blocks = rec.blocks
    if n_blocks and setup.optimizer is not None and config.checkpointing is None:
        out.append(_option("checkpoint every block", setup, with_(config, checkpointing="full"),
                           conf, capacity, base_ops, f"{n_blocks} blocks recomputed in backward",
                           **same))
        half = tuple(range(0, n_blocks, 2))
        out.append(_option("checkpoint every other block", setup,
                           with_(config, checkpointing=half), conf, capacity, base_ops,
                           f"selective: blocks {list(half)[:6]}{'...' if len(half) > 6 else ''}",
                           **same))
    if setup.optimizer is not None and rec.device == "cuda" and p.offload != "activations":
        out.append(_option("offload saved tensors to CPU", setup, config, conf, capacity,
                           base_ops, offload="activations", host_memory=host_memory))
    if setup.optimizer is not None and p.offload != "optimizer":
        out.append(_option("offload optimizer state to CPU", setup, config, conf, capacity,
                           base_ops, offload="optimizer", host_memory=host_memory))
    if setup.optimizer is not None:
        for k in (2, 4):
            if config.batch_size % (config.accumulation * k) == 0:
                acc = config.accumulation * k
                out.append(_option(f"accumulate {acc} micro-batches", setup,
                                   with_(config, accumulation=acc), conf, capacity, base_ops,
                                   f"same batch of {config.batch_size}, {acc} backward passes",
                                   **same))
    _mark_pareto(out)
    return out


def _mark_pareto(options):
    ok = [o for o in options if o.peak_reserved_bytes is not None]
    for o in ok:
        # cost: extra FLOPs, bytes moved to the host and pinned host bytes, compared separately
        # (no exchange rate)
        def key(x):
            return (x.peak_reserved_bytes, x.extra_compute, x.transfer_bytes, x.host_pinned_bytes)
        o.pareto = not any(all(a <= b for a, b in zip(key(q), key(o))) and key(q) != key(o)
                           for q in ok)


def _settings(rec, conf, capacity):
    requests = [e["size"] for e in rec.trace if e["action"] == "alloc"]
    expandable = "expandable_segments:true" in conf.replace(" ", "").lower()
    found = search_settings(rec, conf, capacity, 0, max(requests, default=0), expandable)
    return [Option(c.name, None, c.peak_reserved_bytes, c.fits, note=c.error or "")
            for c in found]


def _not_seen(rec, context_bytes):
    ws = [e for e in rec.trace if e.get("estimate")]
    out = [{"what": "CUDA context", "estimate_bytes": context_bytes,
            "how": "subtracted from the card before replay (CUDA_CONTEXT_BYTES)"}]
    for e in ws:
        out.append({"what": e["estimate"], "estimate_bytes": e["size"],
                    "how": "added to the trace at the thread's first matrix multiply"})
    if rec.device != "cuda":
        out.append({"what": "cuBLAS workspaces", "estimate_bytes": 0,
                    "how": "not added: traced on fake CPU tensors"})
    out += [{"what": w, "estimate_bytes": None, "how": "not seen"} for w in NOT_SEEN]
    return out

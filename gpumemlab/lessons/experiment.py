"""``gml.experiment``: a lesson's experiment on your device, beside the model's prediction.

``gml.experiment("fragmentation_oom", gpu)`` runs the named ``selftest`` scenario on a simulated
card of ``gpu``'s size (the prediction) and, when ``gpu`` is a real CUDA card (``gml.device()``
gave a ``CudaGPU``), measures it on that card under ``gpu``'s budget: "the model predicts X; your
GPU measured Y". The measurement runs in a fresh child process, as ``gpumemlab selftest`` does,
because PyTorch reads allocator settings once per process and a lesson's kernel may hold cached
memory of its own; ``gpu``'s cache is emptied first so that the child can have the budget.
Without CUDA the result says so in one line and shows the prediction alone.
"""
from __future__ import annotations

from gpumemlab.units import format_size
from . import selftest as st
from gpumemlab.devices.compare import compare, summary

__all__ = ["experiment", "Experiment", "ExperimentResult"]


def _story(s: dict) -> str:
    steps = s["steps"]
    if s["oom_step"] is not None:
        what = f"an OOM at step {s['oom_step']} ({steps[s['oom_step']][0]})"
    else:
        what = f"no OOM in {len(steps)} step{'s' if len(steps) != 1 else ''}"
    peak_alloc = max((st_[2] for st_ in steps), default=0)
    peak_res = max((st_[3] for st_ in steps), default=0)
    return (f"{what}, peak allocated {format_size(peak_alloc)}, "
            f"peak reserved {format_size(peak_res)}")


class ExperimentResult:
    """One scenario: ``predicted`` (the model's summary), ``measured`` (the card's, or None
    without CUDA), ``differences`` (lines) and ``record`` (the model's ScenarioRecord)."""

    def __init__(self, scenario, budget, record, measured):
        self.scenario, self.budget, self.record = scenario, budget, record
        self.predicted = summary(record)
        self.measured = measured
        self.differences = compare(self.predicted, measured) if measured is not None else []

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def equal(self):
        """True/False when measured on a card, None when there was none."""
        return None if self.measured is None else not self.differences

    def line(self, said_no_cuda: bool = False) -> str:
        """The result in one line (``said_no_cuda``: leave out that there is no CUDA GPU)."""
        head = f"{self.name} (lesson {self.scenario.lesson}, {format_size(self.budget)})"
        if self.measured is None:
            only = "" if said_no_cuda else "not a CUDA GPU here, so the simulator only: "
            return f"{head}: {only}the model predicts {_story(self.predicted)}"
        if self.measured.get("error") and not self.measured["steps"]:
            return (f"{head}: the model predicts {_story(self.predicted)}; your GPU could not "
                    f"run it: {self.measured['error']}")
        verdict = (f"the same at all {len(self.predicted['steps'])} steps, in the segment "
                   f"layout and the statistics" if not self.differences else
                   f"{len(self.differences)} difference(s), first: {self.differences[0]}")
        return (f"{head}: the model predicts {_story(self.predicted)}; your GPU measured "
                f"{_story(self.measured)}: {verdict}")

    def __str__(self):
        return self.line()

    def __repr__(self):
        return f"<ExperimentResult {self}>"


class Experiment(list):
    """The results of ``experiment()``, one line each when printed; without CUDA one line
    first says so."""

    def __str__(self):
        if len(self) > 1 and all(r.measured is None for r in self):
            return "\n".join(["Not a CUDA GPU here (gml.device() gave the simulator), so these "
                              "are the model's predictions alone:"] +
                             [r.line(said_no_cuda=True) for r in self])
        lines = [r.line() for r in self]
        said = [r.measured for r in self if r.measured and r.measured.get("budget")]
        if said:               # what the last measurement took from the card and gave back
            lines.append(f"On the card (a fresh process each): {said[-1]['budget']}; "
                         f"{said[-1].get('released', '')}")
        return "\n".join(lines)

    @property
    def equal(self):
        return None if any(r.equal is None for r in self) else all(r.equal for r in self)


def experiment(names, gpu, *, measure=None) -> Experiment:
    """Run the scenario(s) ``names`` (a name or a list, see ``gpumemlab selftest``) on the
    model at ``gpu``'s size and, if ``gpu`` is a CudaGPU, on its card within its budget.
    ``measure(scenario, budget)``, if given, measures instead of the child process on the card
    (tests use it to run that child on the model)."""
    if isinstance(names, str):
        names = [names]
    scenarios = [st.by_name(n) for n in names]
    budget = int(gpu.total_memory)
    real = getattr(gpu, "kind", None) == "cuda"
    if real:
        gpu.empty_cache()
        measure = measure or st.run_on_cuda
    real = measure is not None
    out = Experiment()
    for sc in scenarios:
        record = st.run_simulated(sc, budget)
        out.append(ExperimentResult(sc, budget, record, measure(sc, budget) if real else None))
    return out

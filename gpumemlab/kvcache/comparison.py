"""``compare``: the vLLM paper's comparison, reproduced from one seeded call.

Models vLLM's Fig. 2 (where KV memory goes per strategy), Fig. 13 (average batch size each
sustains), Fig. 15 (memory saved by sharing) and a memory-side version of Fig. 18b (block-size
sweep). Requests all arrive at step 0 (saturated), so memory, not the arrival rate, limits the
batch; the paper ran Poisson traces at fixed rates, which is one reason the batch sizes differ.
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from . import paper
from .accounting import CATEGORIES
from .figures import comparison_figure
from .sharing import sharing_savings
from .simulator import simulate
from .strategies import LABELS
from .workloads import make_workload

CONTIGUOUS_AND_PAGED = ("static", "orca-max", "orca-pow2", "orca-oracle", "paged")
SWEEP_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class Comparison:
    """Results of :func:`compare`: ``results[(workload, strategy)]``, ``sweep[(workload, block)]``,
    ``sharing[workload]``; ``table()`` and ``figure()`` show them beside the paper's values."""

    seed: int
    results: dict
    sweep: dict
    sharing: dict

    @property
    def workloads(self) -> list:
        return list(dict.fromkeys(w for w, _ in self.results))

    def breakdown_table(self, workload: str = "sharegpt") -> str:
        rows = [f"KV memory by category, {workload}-like (ours / paper Fig. 2), percent",
                f"{'strategy':<16}{'tokens':>14}{'reserved':>14}{'internal':>14}{'ext.+others':>14}"]
        for (w, s), r in self.results.items():
            if w != workload:
                continue
            # Fig. 2 was measured on the ShareGPT trace only
            ref = paper.FIG2_BREAKDOWN.get(s, {}) if workload == "sharegpt" else {}
            ours = [r.shares["token_states"], r.shares["reserved"], r.shares["internal_fragmentation"],
                    r.shares["external_fragmentation"] + r.shares["unused"]]
            keys = ["token_states", "reserved", "internal_fragmentation", "external_and_others"]
            cells = "".join(f"{100 * o:7.1f} /{ref[k]:5.1f}" if k in ref else f"{100 * o:7.1f} /  -  "
                            for o, k in zip(ours, keys))
            rows.append(f"{LABELS[s]:<16}{cells}")
        return "\n".join(rows)

    def batch_table(self) -> str:
        rows = ["Mean concurrent requests (ours, saturated / paper Fig. 13)"]
        for (w, s), r in self.results.items():
            ref = paper.FIG13_BATCH.get(w, {}).get(s)
            ref_text = f"{ref:7.2f}" if ref is not None else "    -  "
            rows.append(f"  {w:<9}{LABELS[s]:<16}{r.mean_batch_size:8.2f} / {ref_text}   "
                        f"preemptions {r.preemptions}")
        return "\n".join(rows)

    def sharing_table(self) -> str:
        rows = ["Memory saved by sharing (ours / paper Fig. 15), percent"]
        for w, res in self.sharing.items():
            for mode, row in res.savings.items():
                ref = paper.FIG15_SAVING.get(w, {}).get(mode, {})
                cells = ", ".join(f"{k}: {100 * v:.1f}" + (f" / {ref[k]:.1f}" if k in ref else "")
                                  for k, v in row.items())
                rows.append(f"  {w:<9}{mode:<18} {cells}")
        return "\n".join(rows)

    def sweep_table(self) -> str:
        rows = ["Paged block-size sweep: token-state share and mean batch"]
        for (w, b), r in self.sweep.items():
            rows.append(f"  {w:<9} block {b:>4}: tokens {100 * r.token_states:5.1f}%, "
                        f"batch {r.mean_batch_size:7.2f}, internal+reserved "
                        f"{100 * (r.shares['internal_fragmentation'] + r.shares['reserved']):5.1f}%")
        return "\n".join(rows)

    def table(self) -> str:
        parts = [self.breakdown_table(w) for w in self.workloads]
        parts += [self.batch_table(), self.sharing_table()]
        if self.sweep:
            parts.append(self.sweep_table())
        return "\n\n".join(parts)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(self.table())}</pre>"

    def __repr__(self) -> str:
        return self.table()

    def figure(self, workload: str = "sharegpt"):
        """A matplotlib Figure: waste breakdown, batch sizes, sharing savings, block-size sweep."""
        return comparison_figure(self, workload)


def block_size_sweep(workload, block_sizes=SWEEP_BLOCK_SIZES, **simulate_kwargs) -> dict:
    """``{block_size: SimulationResult}`` of the paged strategy for each block size."""
    return {b: simulate("paged", workload, block_size=b, **simulate_kwargs) for b in block_sizes}


def compare(seed: int = 0, *, num_requests: int = 2000, kv_memory="12GiB", model="opt-13b",
            block_size: int = 16, workloads=("sharegpt", "alpaca"), strategies=CONTIGUOUS_AND_PAGED,
            block_sizes=SWEEP_BLOCK_SIZES, sharing_requests: int = 60, widths=(2, 4, 6),
            max_num_seqs: int = 256) -> Comparison:
    """Run every strategy on every workload, the sharing study and the block-size sweep.

    The same ``seed`` gives the same requests and the same numbers. Takes about 10 s with the
    defaults; lower ``num_requests`` and ``sharing_requests`` for a quick look.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, not {type(seed).__name__}")
    results, sweep, sharing = {}, {}, {}
    for name in workloads:
        wl = make_workload(name, num_requests, seed=seed)
        key = wl.name.replace("-like", "")
        for strategy in strategies:
            results[(key, strategy)] = simulate(strategy, wl, kv_memory, model=model,
                                                block_size=block_size, max_num_seqs=max_num_seqs)
        for b, r in block_size_sweep(wl, block_sizes, kv_memory=kv_memory, model=model,
                                     max_num_seqs=max_num_seqs).items():
            sweep[(key, b)] = r
        if sharing_requests:
            sharing[key] = sharing_savings(wl, widths=widths, block_size=block_size,
                                           num_requests=sharing_requests, seed=seed)
    return Comparison(seed, results, sweep, sharing)


__all__ = ["compare", "block_size_sweep", "Comparison", "CATEGORIES"]

"""Memory saved by sharing KV blocks: parallel sampling and beam search (vLLM Fig. 15, §6.3).

Models vLLM's §4.4 with the real :class:`BlockManager` (fork, append with copy-on-write, free):

- Parallel sampling with ``n`` samples: the prompt is written once and forked ``n`` times; only the
  partly filled last prompt block is copied; every sample then writes its own tokens. All samples
  get the request's output length (a simplification: real samples end at different lengths).
- Beam search with width ``k``: every step, each beam proposes tokens from a random next-token
  distribution (log-softmax of Gaussian logits over a small vocabulary, seeded), the ``k`` best
  cumulative scores survive, each survivor forks its parent and appends its token, and the old
  beams are freed. Beams that share an ancestry share its blocks, as in a process tree.

Saving = blocks saved by sharing / blocks needed without sharing (each sequence its own copy),
summed over every decode step of every request, as the paper defines it.
"""
from __future__ import annotations

from dataclasses import dataclass

from .block_table import BlockManager


def _blocks(length: int, bs: int) -> int:
    return -(-length // bs)


def parallel_sampling_blocks(prompt_len: int, output_len: int, n: int, block_size: int):
    """(blocks without sharing, blocks with sharing), summed over the decode steps of one request."""
    m = BlockManager(n * _blocks(prompt_len + output_len, block_size) + 1, block_size)
    m.append("prompt", prompt_len)
    for i in range(n):
        m.fork("prompt", i)
    m.free("prompt")
    unshared = shared = 0
    for _ in range(output_len):
        for i in range(n):
            m.append(i, 1)
        unshared += m.logical_blocks()
        shared += m.num_used_blocks
    return unshared, shared


def beam_search_blocks(prompt_len: int, output_len: int, width: int, block_size: int, rng, *,
                       vocab: int = 32, logit_std: float = 2.0):
    """(blocks without sharing, blocks with sharing), summed over the decode steps of one request."""
    import numpy as np
    # old and new beams coexist while the survivors fork: room for both generations
    m = BlockManager(2 * width * (_blocks(prompt_len + output_len, block_size) + 1), block_size)
    m.append(0, prompt_len)
    beams, scores = [0], np.zeros(1)
    name = 1
    unshared = shared = 0
    for _ in range(output_len):
        logits = rng.normal(0.0, logit_std, size=(len(beams), vocab))
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        cand = (scores[:, None] + logp).ravel()
        best = np.argsort(-cand, kind="stable")[:width]    # stable: ties break by beam order
        children = []
        for flat in best.tolist():
            parent = beams[flat // vocab]
            m.fork(parent, name)
            m.append(name, 1)
            children.append(name)
            name += 1
        for old in beams:
            m.free(old)
        beams, scores = children, cand[best]
        unshared += m.logical_blocks()
        shared += m.num_used_blocks
    return unshared, shared


@dataclass
class SharingResult:
    """Savings (fractions) per mode and width, e.g. ``savings["beam"][4]``."""

    workload: str
    block_size: int
    num_requests: int
    savings: dict

    def table(self) -> str:
        lines = [f"Memory saved by sharing, {self.workload}, block {self.block_size} "
                 f"({self.num_requests} requests)"]
        for mode, row in self.savings.items():
            cells = ", ".join(f"{k}: {100 * v:.1f}%" for k, v in row.items())
            lines.append(f"  {mode:<18} {cells}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.table()


def sharing_savings(workload, *, widths=(2, 4, 6), block_size: int = 16, num_requests: int = 50,
                    seed: int = 0, logit_std: float = 2.0) -> SharingResult:
    """Fig. 15: memory saved by sharing under parallel sampling and beam search.

    Args:
        workload: a Workload; its first ``num_requests`` requests are used.
        widths: numbers of parallel samples / beam widths.
        block_size: tokens per block.
        seed: seeds the random next-token distributions of beam search.
        logit_std: spread of the random logits; larger means more peaked distributions.
    """
    import numpy as np
    if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
        raise ValueError(f"widths must be positive ints, got {widths!r}")
    if isinstance(num_requests, bool) or not isinstance(num_requests, int) or num_requests < 1:
        raise ValueError(f"num_requests must be a positive int, got {num_requests!r}")
    reqs = list(zip(workload.prompt_lens[:num_requests].tolist(),
                    workload.output_lens[:num_requests].tolist()))
    savings = {"parallel sampling": {}, "beam search": {}}
    for width in widths:
        rng = np.random.default_rng(seed)
        totals = {"parallel sampling": [0, 0], "beam search": [0, 0]}
        for p, o in reqs:
            for mode, (u, s) in (("parallel sampling", parallel_sampling_blocks(p, o, width, block_size)),
                                 ("beam search", beam_search_blocks(p, o, width, block_size, rng,
                                                                    logit_std=logit_std))):
                totals[mode][0] += u
                totals[mode][1] += s
        for mode, (u, s) in totals.items():
            savings[mode][width] = (u - s) / u if u else 0.0
    return SharingResult(workload.name, block_size, len(reqs), savings)

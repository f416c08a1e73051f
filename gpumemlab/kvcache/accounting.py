"""Where KV memory goes, step by step: the vLLM paper's §3.1 waste categories, time-averaged.

Categories (bytes held at a decode step; each step weighs the same):

- ``token_states``: slots holding K/V of tokens already processed by live requests.
- ``reserved``: slots a live request holds for tokens it WILL produce (known only in hindsight):
  the rest of a contiguous reservation up to the request's true length; for paged, the empty
  slots of a last block that the request will still fill.
- ``internal_fragmentation``: slots a live request holds that it will NEVER use: a contiguous
  reservation past the true length (plus the allocator's rounding of the buffer size); the never-
  filled tail of a paged request's final block; in static batches, the buffers of finished requests
  still held until the batch ends.
- ``external_fragmentation``: memory held by no request, at a step where the first waiting request
  was refused although this free memory in total would have held it (it is not in one piece: the
  caching allocator's free blocks are scattered between live buffers).
- ``unused``: memory held by no request otherwise (nobody waits, the waiting request is larger than
  all free memory, or the batch is capped). The paper's fourth column, "external fragmentation &
  others", is ``external_fragmentation + unused``.

Two windows are summed: every step with a request running (``all``), and the steps at which a
request was still waiting after admission (``saturated``): there memory, or the batch cap, is what
limits the batch, which is the regime the paper's Fig. 2 describes.
"""
from __future__ import annotations

CATEGORIES = ("token_states", "reserved", "internal_fragmentation", "external_fragmentation", "unused")
_FIELDS = CATEGORIES + ("batch", "cached_free", "steps")


class Accumulator:
    """Sums of bytes x steps per category, for the ``all`` and ``saturated`` windows."""

    def __init__(self):
        self.sums = {"all": dict.fromkeys(_FIELDS, 0), "saturated": dict.fromkeys(_FIELDS, 0)}

    def add(self, k: int, saturated: bool, *, token_states, token_slope, reserved_plus_tokens,
            internal, external, unused, batch, cached_free=0) -> None:
        """Add ``k`` identical steps, except that token states grow by ``token_slope`` bytes a step
        while ``reserved`` shrinks by as much (their sum stays ``reserved_plus_tokens``)."""
        tokens = k * token_states + token_slope * (k * (k - 1) // 2)
        values = (tokens, k * reserved_plus_tokens - tokens, k * internal, k * external, k * unused,
                  k * batch, k * cached_free, k)
        windows = ("all", "saturated") if saturated else ("all",)
        for window in windows:
            sums = self.sums[window]
            for name, value in zip(_FIELDS, values):
                sums[name] += value

    def shares(self, window: str) -> dict:
        """Each category's share of all KV memory over the window (fractions summing to 1)."""
        sums = self.sums[window]
        total = sum(sums[c] for c in CATEGORIES)
        return {c: (sums[c] / total if total else 0.0) for c in CATEGORIES}

    def mean(self, window: str, field: str) -> float:
        steps = self.sums[window]["steps"]
        return self.sums[window][field] / steps if steps else 0.0

    def steps(self, window: str) -> int:
        return self.sums[window]["steps"]

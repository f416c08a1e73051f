"""Where the iterations of a recording begin, when nothing marks them.

A training or serving loop runs the same code every step, so its allocations come from the same
sites (the allocating stack, ``growth._site_key``) step after step. The first allocation of a
step is made by a site that recurs once per step: the *anchor*. Candidates are the sites that
recur, in the order of their first allocation (the first frame that recurs comes first); each
splits the trace at its occurrences (back-to-back occurrences, such as ``x`` and ``y`` made on
one line, count as one), or at every second, third or fourth of them (a site that allocates
twice per step, such as two ``nn.Linear`` layers called from one line). A split is scored by
how alike its iterations are: the mean, over the iterations, of the multiset similarity (shared
allocations / all allocations, by site) between an iteration and the most common one, times
the share of allocations not left before the first iteration at sites the iterations use; the
best score wins, the earliest anchor on a tie. That score is how sure the finding is: 1.0 when
every step allocates at the same sites the same number of times; extra allocations in one step
(an optimizer's state, made by the first) lower it a little, a cut that is no step at all lowers
it a lot. Sizes are not part of a site, so new shapes do not lower it.

Not found: loops whose steps share no site (every step different code), and loops whose first
allocation site also allocates elsewhere in the step at unrelated times (then another anchor,
or a low score, is reported).
"""
from __future__ import annotations

from collections import Counter

__all__ = ["find_iterations", "LEVELS"]

CANDIDATES = 12          # anchors tried, in order of first allocation
EVERY = (1, 2, 3, 4)     # split at every run of the anchor, every second, ...
LEVELS = ((0.9, "high"), (0.6, "medium"), (0.0, "low"))


def _similarity(a: Counter, b: Counter) -> float:
    union = sum((a | b).values())
    return 1.0 if not union else sum((a & b).values()) / union


def _runs(allocs, key):
    """Trace indices at which ``key`` starts a run (back-to-back occurrences are one run)."""
    starts, prev_pos = [], None
    for pos, (i, k) in enumerate(allocs):
        if k != key:
            continue
        if prev_pos is None or pos != prev_pos + 1:
            starts.append(i)
        prev_pos = pos
    return starts


def _score(allocs, starts, n):
    """Mean similarity of the iterations (by allocation site) to the most common one, times
    the share of allocations not left before the first iteration at sites that the
    iterations use (a step missed at the start)."""
    bounds = starts + [n]
    bags, k = [], 0
    for s, e in zip(bounds, bounds[1:]):
        bag = Counter()
        while k < len(allocs) and allocs[k][0] < s:
            k += 1
        while k < len(allocs) and allocs[k][0] < e:
            bag[allocs[k][1]] += 1
            k += 1
        bags.append(bag)
    signature = Counter(frozenset(b.items()) for b in bags)
    ref = Counter(dict(signature.most_common(1)[0][0]))
    missed = sum(1 for i, k in allocs if i < starts[0] and k in ref)
    return (sum(_similarity(b, ref) for b in bags) / len(bags)) * (1 - missed / len(allocs))


def level(confidence: float) -> str:
    return next(name for floor, name in LEVELS if confidence >= floor)


def find_iterations(trace, site_key):
    """``(starts, info)``: the trace index at which each iteration begins, and how they were
    found (``info``: ``anchor_index``, ``anchor_site``, ``confidence``, ``level``,
    ``candidates``); ``starts`` is empty when no site recurs."""
    allocs = [(i, site_key(e)) for i, e in enumerate(trace) if e["action"] == "alloc"]
    counts = Counter(k for _i, k in allocs)
    order, seen = [], set()
    for _i, k in allocs:
        if counts[k] > 1 and k not in seen:
            seen.add(k)
            order.append(k)
            if len(order) == CANDIDATES:
                break
    best = None
    for key in order:
        runs = _runs(allocs, key)
        for every in EVERY:
            starts = runs[::every]
            if len(starts) < 2 or len(runs) % every:
                continue
            score = _score(allocs, starts, len(trace))
            if best is None or score > best[0] + 1e-9:
                best = (score, every, key, starts)
        if best is not None and best[0] >= 1.0 - 1e-9:
            break             # a later anchor can only tie, and ties go to the earlier one
    if best is None:
        return [], {"anchor_index": None, "anchor_site": None, "confidence": 0.0,
                    "level": "low", "candidates": len(order)}
    score, _every, key, starts = best
    return starts, {"anchor_index": starts[0], "anchor_site": key,
                    "confidence": round(score, 3), "level": level(score),
                    "candidates": len(order)}

"""``SortedKeys``: a sorted set of ints that stays cheap at a million entries, standing in for
the ``std::set`` (a red-black tree) behind c10's ``BlockPool::blocks``.

A plain sorted Python list pays a memory shift of the whole tail on every insert and erase, so a
pool of a million free blocks costs 18x per event what ten thousand cost. Here the keys are cut
into sorted runs of at most ``2 * LOAD`` (a "blocked sorted list"): a run is found by bisecting
the runs' last keys, and an insert or erase shifts only that run. Runs that grow past
``2 * LOAD`` are halved; runs that shrink under ``LOAD // 4`` join a neighbour. Standard
library only; the property tests compare it with a plain sorted list.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right, insort

LOAD = 500


class SortedKeys:
    """Distinct ints in ascending order, with the ``std::set`` queries the allocator makes."""

    __slots__ = ("_runs", "_maxes", "_len")

    def __init__(self):
        self._runs = []  # sorted runs; all keys of run i are below all keys of run i + 1
        self._maxes = []  # the last key of each run
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self):
        for run in self._runs:
            yield from run

    def __contains__(self, key) -> bool:
        i = bisect_left(self._maxes, key)
        if i == len(self._maxes):
            return False
        run = self._runs[i]
        return run[bisect_left(run, key)] == key

    def add(self, key) -> None:
        maxes = self._maxes
        i = bisect_left(maxes, key)
        if i == len(maxes):
            if not maxes:
                self._runs.append([key])
                maxes.append(key)
                self._len = 1
                return
            i -= 1
            run = self._runs[i]
            run.append(key)
            maxes[i] = key
        else:
            run = self._runs[i]
            insort(run, key)
        self._len += 1
        if len(run) > 2 * LOAD:
            self._runs.insert(i + 1, run[LOAD:])
            del run[LOAD:]
            maxes[i] = run[-1]
            maxes.insert(i + 1, self._runs[i + 1][-1])

    def remove(self, key) -> None:
        """Erase ``key``; KeyError if it is not there."""
        maxes = self._maxes
        i = bisect_left(maxes, key)
        if i == len(maxes):
            raise KeyError(key)
        run = self._runs[i]
        j = bisect_left(run, key)
        if run[j] != key:
            raise KeyError(key)
        del run[j]
        self._len -= 1
        if not run:
            del self._runs[i]
            del maxes[i]
        else:
            if j == len(run):
                maxes[i] = run[-1]
            if len(run) < LOAD // 4 and len(self._runs) > 1:
                self._join(i)

    def _join(self, i: int) -> None:
        """Merge run ``i`` into a neighbour (then halve it again if it grew too long)."""
        runs, maxes = self._runs, self._maxes
        if i == len(runs) - 1:
            i -= 1  # join the last run to the one before it
        runs[i].extend(runs[i + 1])
        maxes[i] = runs[i][-1]
        del runs[i + 1]
        del maxes[i + 1]
        run = runs[i]
        if len(run) > 2 * LOAD:
            runs.insert(i + 1, run[LOAD:])
            del run[LOAD:]
            maxes[i] = run[-1]
            maxes.insert(i + 1, runs[i + 1][-1])

    def ceiling(self, key):
        """The smallest key >= ``key`` (``lower_bound``), or None."""
        maxes = self._maxes
        i = bisect_left(maxes, key)
        if i == len(maxes):
            return None
        run = self._runs[i]
        return run[bisect_left(run, key)]

    def higher(self, key):
        """The smallest key > ``key`` (``upper_bound``; the next one in a walk), or None."""
        maxes = self._maxes
        i = bisect_right(maxes, key)
        if i == len(maxes):
            return None
        run = self._runs[i]
        return run[bisect_right(run, key)]

    def lower(self, key):
        """The largest key < ``key`` (one step back from ``lower_bound``), or None."""
        maxes = self._maxes
        i = bisect_left(maxes, key)
        if i < len(maxes):
            run = self._runs[i]
            j = bisect_left(run, key)
            if j:
                return run[j - 1]
        return maxes[i - 1] if i else None

    def check(self) -> None:
        """Raise AssertionError unless the runs are sorted, ordered and sized as described."""
        previous = None
        count = 0
        for run, last in zip(self._runs, self._maxes, strict=True):
            assert run and run[-1] == last and len(run) <= 2 * LOAD, "run bookkeeping"
            for key in run:
                assert previous is None or previous < key, "keys out of order"
                previous = key
            count += len(run)
        assert len(self._runs) == len(self._maxes) and count == self._len, "length bookkeeping"

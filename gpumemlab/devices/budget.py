"""Budgets on shared cards: how much of a real GPU a lesson may take, decided before it takes any.

PyTorch's per-process cap (``torch.cuda.set_per_process_memory_fraction``, c10
``setMemoryFraction``: ``allowed_memory_maximum = fraction * totalGlobalMem``) limits what this
process's caching allocator may reserve; it does not make the memory free. On a card that other
processes use, a budget is only honest if that much is free now (``torch.cuda.mem_get_info``). So
a CudaGPU decides with :func:`decide_budget`, a pure function of the card's numbers (testable
without a GPU), caps itself with :func:`fraction_for`, and says what it did in one line.
"""
from __future__ import annotations

from dataclasses import dataclass

from gpumemlab.units import format_size

__all__ = ["BudgetDecision", "BudgetError", "CardTooBusyError", "decide_budget", "fraction_for",
           "MIN_BUDGET"]

MIN_BUDGET = 2 * 1024 * 1024          # one small segment (kSmallBuffer)


class BudgetError(ValueError):
    """A budget that no card state could honour: below 2 MiB or larger than the card."""


class CardTooBusyError(RuntimeError):
    """The card is real and the budget fits it, but other users leave too little free now."""


@dataclass(frozen=True)
class BudgetDecision:
    """What to do: ``use_cuda`` (else the simulator), the budget, and the line that says why."""
    use_cuda: bool
    budget: int
    message: str


def decide_budget(budget: int, device_total: int, device_free: int, *,
                  process_reserved: int = 0, name: str = "the GPU") -> BudgetDecision:
    """Decide whether a lesson may take ``budget`` bytes of a card now.

    ``device_total``/``device_free`` are ``mem_get_info``'s figures (free already excludes this
    process's CUDA context and cache); ``process_reserved`` is what this process's allocator
    holds already (after ``empty_cache()``): it counts against the cap, and it needs no new free
    memory. Raises :class:`BudgetError` for a budget no card state could honour.
    """
    for label, value in (("budget", budget), ("device_total", device_total),
                         ("device_free", device_free), ("process_reserved", process_reserved)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BudgetError(f"{label} must be a non-negative number of bytes, got {value!r}")
    if budget < MIN_BUDGET:
        raise BudgetError(f"a budget of {format_size(budget)} is below the 2 MiB minimum "
                          f"(one small segment)")
    if budget > device_total:
        raise BudgetError(f"a budget of {format_size(budget)} is larger than {name}'s "
                          f"{format_size(device_total)}: refused")
    if process_reserved > budget:
        return BudgetDecision(False, budget, (
            f"this process already holds {format_size(process_reserved)} of {name}, more than "
            f"the {format_size(budget)} budget: free it (del tensors, torch.cuda.empty_cache()) "
            f"or use a larger budget; running on the simulator instead"))
    needed = budget - process_reserved
    if device_free < needed:
        return BudgetDecision(False, budget, (
            f"{name} is too busy: {format_size(device_free)} free of "
            f"{format_size(device_total)}, and a budget of {format_size(budget)} needs "
            f"{format_size(needed)} free; running on the simulator instead"))
    return BudgetDecision(True, budget, (
        f"using at most {format_size(budget)} of {name} ({format_size(device_free)} of "
        f"{format_size(device_total)} free), capped with set_per_process_memory_fraction"
        f"({fraction_for(budget, device_total):.6f})"))


def fraction_for(budget: int, device_total: int) -> float:
    """The fraction whose ``static_cast<size_t>(fraction * total)`` is exactly ``budget``.

    Half a byte more than ``budget / total``: the product is then ``budget + 0.5`` give or take
    a rounding error far below a byte, so the cast truncates to ``budget`` and not one byte less.
    """
    if device_total <= 0:
        raise BudgetError(f"device_total must be positive, got {device_total!r}")
    return min(1.0, (budget + 0.5) / device_total)

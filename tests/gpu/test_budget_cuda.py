"""Budgets on the real card: never more than the budget, refused when larger than the card, the
simulator (with a message) when the card is too busy, everything given back on close."""
import pytest

import gpumemlab as gml
from gpumemlab.devices.budget import BudgetError, CardTooBusyError

MiB = 1024**2


def _card():
    import torch
    free, total = torch.cuda.mem_get_info(0)
    return int(free), int(total)


def test_a_budget_larger_than_the_card_is_refused():
    _free, total = _card()
    with pytest.raises(BudgetError, match="larger than"):
        gml.CudaGPU(total + 2 * MiB)
    with pytest.raises(BudgetError, match="larger than"):
        gml.device(memory=total + 2 * MiB)


def test_the_cap_holds_at_the_budget():
    import torch
    gpu = gml.CudaGPU("512MiB")
    assert "using at most 512.00 MiB" in gpu.budget_message
    held = []
    with pytest.raises(torch.OutOfMemoryError):
        while True:
            held.append(gpu.empty(20 * MiB))
    assert gpu.memory_reserved() <= 512 * MiB
    assert len(held) * 20 * MiB > 512 * MiB - 40 * MiB      # it was the cap that stopped it
    gpu.close()
    assert torch.cuda.memory_reserved() == 0


def test_a_busy_card_gives_the_simulator_with_a_message(capsys):
    free, total = _card()
    too_much = min(total, free + 1024 * MiB)
    if too_much <= free:
        pytest.skip("the card is free to the last byte of its total: cannot be too busy")
    with pytest.raises(CardTooBusyError, match="too busy"):
        gml.CudaGPU(too_much)
    gpu = gml.device(memory=too_much)
    assert gpu.kind == "simulated" and gpu.total_memory == too_much
    assert "too busy" in capsys.readouterr().out
    with pytest.raises(CardTooBusyError):
        gml.device("cuda", memory=too_much)

"""The budget decision on shared cards, from injected card figures (no GPU needed): refused when
larger than the card, the simulator when the card is too busy, and a cap that is exact to the byte
under c10's ``static_cast<size_t>(fraction * total)``."""
import pytest
from hypothesis import given, strategies as st

from gpumemlab.devices.budget import (MIN_BUDGET, BudgetError, decide_budget, fraction_for)

MiB, GiB = 1024**2, 1024**3
H200 = 150_754_820_096          # torch.cuda.get_device_properties(0).total_memory of an H200


def test_a_free_card_is_used_and_the_line_says_how():
    d = decide_budget(4 * GiB, H200, 140 * GiB, name="GPU 0 (NVIDIA H200)")
    assert d.use_cuda and d.budget == 4 * GiB
    assert "at most 4.00 GiB of GPU 0 (NVIDIA H200)" in d.message
    assert "set_per_process_memory_fraction(0.028" in d.message and "\n" not in d.message


def test_a_busy_card_gives_the_simulator_and_says_why():
    d = decide_budget(4 * GiB, H200, 3 * GiB, name="GPU 0")
    assert not d.use_cuda
    assert "too busy: 3.00 GiB free" in d.message and "needs 4.00 GiB free" in d.message
    assert "simulator" in d.message


def test_memory_the_process_already_holds_counts_against_the_budget_not_the_free():
    assert decide_budget(4 * GiB, H200, 3 * GiB, process_reserved=1 * GiB).use_cuda
    d = decide_budget(4 * GiB, H200, 100 * GiB, process_reserved=5 * GiB)
    assert not d.use_cuda and "already holds 5.00 GiB" in d.message


def test_exactly_enough_free_is_enough():
    assert decide_budget(2 * GiB, H200, 2 * GiB).use_cuda
    assert not decide_budget(2 * GiB, H200, 2 * GiB - 1).use_cuda


@pytest.mark.parametrize("budget, total, why", [
    (H200 + 1, H200, "larger than"), (MIN_BUDGET - 1, H200, "below the 2 MiB"),
    (-1, H200, "non-negative"), (True, H200, "non-negative"), (1.5 * GiB, H200, "non-negative")])
def test_impossible_budgets_are_refused(budget, total, why):
    with pytest.raises(BudgetError, match=why):
        decide_budget(budget, total, total)


@given(budget=st.integers(MIN_BUDGET, 200 * GiB), total=st.integers(MIN_BUDGET, 200 * GiB))
def test_the_fraction_caps_at_the_budget_to_the_byte(budget, total):
    if budget > total:
        budget, total = total, budget
    fraction = fraction_for(budget, total)
    assert 0 < fraction <= 1
    # c10 setMemoryFraction: allowed_memory_maximum = static_cast<size_t>(fraction * total)
    assert int(fraction * total) == budget or (fraction == 1.0 and budget == total)

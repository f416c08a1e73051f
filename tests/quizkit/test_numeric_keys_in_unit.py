"""Every numeric question accepts its own key typed in its unit, with and without the unit's name.

A fresh learner found 15.1 (an ``expr`` already in GiB) judged right only for "0": the checker
divided every key by the unit's bytes, so 07.1, 07.4, 08.2, 10.3 and 15.1 wanted a number a
million times too small.
"""
import pytest

from gpumemlab.quizkit.bank import all_banks
from gpumemlab.quizkit.checker import evaluate, expected_in_unit

NUMERIC = [q for b in all_banks() for q in b.questions if q.kind == "numeric"]
SIZE_UNITS = ("bytes", "KiB", "MiB", "GiB")


@pytest.mark.parametrize("q", NUMERIC, ids=lambda q: q.id)
def test_key_typed_in_its_unit_is_right(q):
    unit = q.data["unit"]
    key = expected_in_unit(q.data["compute"], unit)
    typed = str(int(key)) if key == int(key) else repr(round(key, 6))
    assert evaluate(q, typed).correct, (q.id, typed, unit)
    if unit in SIZE_UNITS:
        assert evaluate(q, f"{typed} {unit}").correct, (q.id, typed, unit)


def test_expr_keys_are_in_the_question_unit():
    by_id = {q.id: q for q in NUMERIC}
    assert expected_in_unit(by_id["15.1"].data["compute"], "GiB") == 8.5
    assert evaluate(by_id["15.1"], "8.5 GiB").correct
    assert evaluate(by_id["15.1"], "8704 MiB").correct
    assert not evaluate(by_id["15.1"], "0").correct
    assert evaluate(by_id["07.1"], "128 MiB").correct
    assert not evaluate(by_id["07.1"], "0.000122").correct
    assert evaluate(by_id["08.2"], "512 KiB").correct
    # typed at the two decimals a lesson prints: 14.90 GiB, within 07.4's 0.01 tolerance
    assert evaluate(by_id["07.4"], "14.90 GiB").correct


def test_ops_keys_are_bytes_shown_in_the_unit():
    by_id = {q.id: q for q in NUMERIC}
    # 01.2: a 1 MiB + 1 B request reserves one 20 MiB large-pool segment (c10's kLargeBuffer)
    assert expected_in_unit(by_id["01.2"].data["compute"], "MiB") == 20
    assert evaluate(by_id["01.2"], "20 MiB").correct

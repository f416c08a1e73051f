"""``author renumber`` moves a sealed bank to another lesson number (issue 35 item 7 renumbered
lessons 12-15 to 14-17): the bank renumbered back is byte for byte the bank that shipped before,
and every answer is still judged right under its new id."""
import subprocess
import sys
from pathlib import Path

import pytest

from gpumemlab.quizkit.author import renumber_text
from gpumemlab.quizkit.bank import parse_bank
from gpumemlab.quizkit.checker import evaluate

import yaml

ROOT = Path(__file__).resolve().parents[2]
BANK = ROOT / "quizzes" / "14_streams.yaml"


def test_renumbering_there_and_back_gives_the_same_bank():
    text = BANK.read_text(encoding="utf-8")
    moved = renumber_text(text, "14", "12")
    assert "'14." not in moved and "notebook: '12'" in moved and "notebook 12:" in moved
    assert renumber_text(moved, "12", "14") == text


def test_the_right_options_stay_right_under_the_new_ids():
    before = parse_bank(yaml.safe_load(BANK.read_text(encoding="utf-8")), BANK)
    after = parse_bank(yaml.safe_load(renumber_text(BANK.read_text(encoding="utf-8"), "14", "12")), BANK)
    for old, new in zip(before.questions, after.questions):
        assert new.id == "12" + old.id[2:]
        letters = "abcdefgh"[:len(old.data.get("options") or [])]
        assert [evaluate(old, c).correct for c in letters] == [evaluate(new, c).correct for c in letters]


def test_a_question_of_another_lesson_is_refused():
    with pytest.raises(ValueError, match="is not a question of lesson 13"):
        renumber_text(BANK.read_text(encoding="utf-8"), "13", "15")


def test_the_command_prints_the_bank():
    out = subprocess.run([sys.executable, "-m", "gpumemlab.quizkit.author", "renumber", str(BANK), "14", "12"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out == renumber_text(BANK.read_text(encoding="utf-8"), "14", "12")

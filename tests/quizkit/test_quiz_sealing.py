"""Sealed feedback, hints and explanations: not readable in the bank files, shown when due."""
import re
from pathlib import Path

import pytest
import yaml

from gpumemlab.quizkit import author
from gpumemlab.quizkit.answers import (SealError, check_sealed, matches, seal_field,
                                       unseal_field)
from gpumemlab.quizkit.bank import BankError, all_banks, parse_bank, plain_fields
from gpumemlab.quizkit.checker import REVEAL_AFTER, evaluate

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "quizzes").glob("[0-9][0-9]*.yaml"))
BANKS = all_banks(ROOT / "quizzes")
_PLAIN_KEYS = {"feedback", "explanation", "hints", "answer", "answers"}


def _squash(text):
    return re.sub(r"\s+", " ", text).strip().lower()


def _readable_strings(node, key=None):
    """(key, string) for every readable string in a bank; sealed blobs and hashes excluded."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _readable_strings(v, k)
    elif isinstance(node, list):
        for v in node:
            yield from _readable_strings(v, key)
    elif isinstance(node, str) and not (key.endswith("_sealed") or key.startswith("answer_hash")
                                         or key == "salt"):
        yield key, node


def _right_letter(q):
    letters = "abcdefgh"[:len(q.data["options"])]
    right = [x for x in letters if matches(q.id, x, q.data["salt"], [q.data["answer_hash"]])]
    assert len(right) == 1, q.id
    return right[0]


def test_every_bank_is_checked():
    lessons = list(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
    assert len(FILES) == len(BANKS) == len(lessons) >= 11


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_shipped_bank_is_fully_sealed(path):
    text = path.read_text(encoding="utf-8")
    assert not re.search(r"^\s*-?\s*(feedback|explanation|hints|answers?)\s*:", text, re.M)
    raw = yaml.safe_load(text)
    for item in raw["questions"]:
        assert not _PLAIN_KEYS & set(item), item["id"]
        for opt in item.get("options", []):
            assert set(opt) <= {"text", "feedback_sealed"}, item["id"]
        if item["kind"] == "choice":
            assert re.fullmatch(r"[0-9a-f]{64}", item["answer_hash"])
        if item["kind"] == "text":
            assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in item["answer_hashes"])
    bank = parse_bank(raw, path)
    assert [q.id for q in bank.questions if plain_fields(q)] == []
    assert author.main(["check", str(path.parent)]) == 0


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_the_right_option_text_is_readable_only_as_an_option(path):
    text = _squash(path.read_text(encoding="utf-8"))
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    strings = list(_readable_strings(raw["questions"]))
    bank = parse_bank(raw, path)
    for q in (q for q in bank.questions if q.kind == "choice"):
        right = _squash(q.data["options"]["abcdefgh".index(_right_letter(q))]["text"])
        # grep the file: every hit is inside an option's text ...
        hits = text.count(right)
        in_options = sum(_squash(s).count(right) for k, s in strings if k == "text")
        assert hits == in_options >= 1, q.id
        # ... and no readable field other than option texts carries it
        assert not [k for k, s in strings if k != "text" and right in _squash(s)], q.id


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_feedback_hint_or_explanation_can_be_grepped_from_the_file(path):
    text = _squash(path.read_text(encoding="utf-8"))
    bank = next(b for b in BANKS if b.path.name == path.name)
    shown = 0
    for q in bank.questions:
        secrets_ = [q.explanation, *q.hints]
        if q.kind == "choice":
            secrets_ += [q.option_feedback(i) for i in range(len(q.data["options"]))]
        for s in filter(None, secrets_):
            shown += 1
            assert _squash(s) not in text, (q.id, s)
            # not even a telling fragment: the first six words
            assert " ".join(_squash(s).split()[:6]) not in text or len(s.split()) < 6, (q.id, s)
    assert shown > 0


def test_the_chosen_options_feedback_and_the_explanation_appear_when_due():
    q = next(b for b in BANKS if b.notebook == "02").get("02.1")
    right = _right_letter(q)
    wrong = [x for x in "abcd" if x != right]
    first = evaluate(q, wrong[0], 0)
    fb = q.option_feedback("abcd".index(wrong[0]))
    assert fb and first.feedback == fb and fb in first.text
    assert first.explanation == "" and first.hints == q.hints[:1]
    assert "_sealed" not in first.text and not re.search(r"[A-Za-z0-9+/]{40,}", first.text)
    late = evaluate(q, wrong[1], REVEAL_AFTER - 1)
    assert late.explanation == q.explanation and "Why: " + q.explanation in late.text
    ok = evaluate(q, right.upper(), 0)
    assert ok.correct and ok.feedback == q.option_feedback("abcd".index(right))
    assert ok.explanation == q.explanation and ok.hints == ()
    assert "Total free is not the same as the largest free gap" in ok.text


def test_loading_decodes_nothing_until_the_text_is_shown(monkeypatch):
    import gpumemlab.quizkit.bank as bank_mod

    def refuse(*a):
        raise AssertionError("decoded at load time")

    monkeypatch.setattr(bank_mod, "unseal_field", refuse)
    banks = all_banks(ROOT / "quizzes")
    q = banks[2].get("02.1")
    assert "explanation" in q.sealed and "hints" in q.sealed
    assert "Total free" not in repr(q)
    with pytest.raises(AssertionError, match="decoded at load time"):
        q.explanation


def test_seal_round_trip_and_tamper_detection():
    blob = seal_field("02.1", "s1", "explanation", "Fragmentation — été")
    assert unseal_field("02.1", "s1", "explanation", blob) == "Fragmentation — été"
    assert blob != seal_field("02.1", "s1", "feedback:a", "Fragmentation — été")
    assert blob != seal_field("02.2", "s1", "explanation", "Fragmentation — été")
    assert blob != seal_field("02.1", "s2", "explanation", "Fragmentation — été")
    check_sealed("02.1", "s1", "explanation", blob)
    for qid, salt, purpose in (("02.2", "s1", "explanation"), ("02.1", "s2", "explanation"),
                               ("02.1", "s1", "hint:1")):
        with pytest.raises(SealError, match="does not match"):
            unseal_field(qid, salt, purpose, blob)
    import base64

    raw = bytearray(base64.b64decode(blob))
    raw[-1] ^= 1
    with pytest.raises(SealError, match="does not match"):
        check_sealed("02.1", "s1", "explanation", base64.b64encode(bytes(raw)).decode())
    with pytest.raises(SealError, match="not valid base64"):
        check_sealed("02.1", "s1", "explanation", "not base64!")


DRAFT = """\
# draft: keep me out of what learners receive
notebook: '02'
title: Draft
questions:
- id: '02.1'
  kind: choice
  prompt: Pick one.
  options:
  - text: Wrong thing.
    feedback: No, that is the wrong thing.
  - text: Right thing.
    feedback: Yes, the right thing.
  answer: b
  hints:
  - Not the wrong one.
  explanation: Because it is right.
- id: '02.2'
  kind: text
  prompt: Name it.
  answers: [Expandable_Segments, expandable_segments]
  explanation: It is expandable_segments.
- id: '02.3'
  kind: numeric
  prompt: How many MiB?
  unit: MiB
  compute: {expr: "20"}
  hints: [Twenty-ish.]
  explanation: Twenty MiB.
"""


def _salts():
    n = iter(range(100))
    return lambda: f"salt{next(n)}"


def test_author_seal_hashes_answers_and_seals_every_readable_field(tmp_path):
    sealed = author.seal_text(DRAFT, salt_factory=_salts())
    assert sealed.startswith("# draft: keep me out")
    for secret in ("that is the wrong thing", "the right thing", "not the wrong one",
                   "because it is right", "it is expandable_segments", "twenty", "answer:", "answers:"):
        assert secret not in sealed.lower(), secret
    bank = parse_bank(yaml.safe_load(sealed), Path("02_x.yaml"))
    assert [plain_fields(q) for q in bank.questions] == [[], [], []]
    q1, q2, q3 = bank.questions
    assert q1.option_feedback(1) == "Yes, the right thing." and q1.hints == ("Not the wrong one.",)
    assert evaluate(q1, "b").correct and evaluate(q1, "b").explanation == "Because it is right."
    assert evaluate(q2, "expandable_segments").correct and len(q2.data["answer_hashes"]) == 1
    assert q3.salt == "salt2" and q3.explanation == "Twenty MiB."
    assert list(yaml.safe_load(sealed)["questions"][0]) == [
        "id", "kind", "prompt", "options", "salt", "answer_hash", "hints_sealed",
        "explanation_sealed"]
    # sealing is idempotent, and unseal gives the readable fields back (answers stay hashed)
    assert author.seal_text(sealed, salt_factory=_salts()) == sealed
    opened = yaml.safe_load(author.unseal_text(sealed))["questions"]
    assert opened[0]["options"][0]["feedback"] == "No, that is the wrong thing."
    assert opened[2]["hints"] == ["Twenty-ish."] and "answer_hash" in opened[0]
    # the CLI: check fails on readable fields unless told they are drafts
    (tmp_path / "02_x.yaml").write_text(author.unseal_text(sealed))
    assert author.main(["check", str(tmp_path)]) == 1
    assert author.main(["check", "--allow-plain", str(tmp_path)]) == 0
    (tmp_path / "02_x.yaml").write_text(sealed)
    assert author.main(["check", str(tmp_path)]) == 0


def test_plain_drafts_still_load_and_show_the_same_text():
    draft = yaml.safe_load(author.unseal_text(author.seal_text(DRAFT, salt_factory=_salts())))
    q = parse_bank(draft, Path("02_x.yaml")).questions[0]
    assert plain_fields(q) == ["explanation", "hints", "options[1].feedback",
                               "options[2].feedback"]
    assert evaluate(q, "a").feedback == "No, that is the wrong thing."
    assert evaluate(q, "b").explanation == "Because it is right."


def _choice(**over):
    sealed = yaml.safe_load(author.seal_text(DRAFT, salt_factory=_salts()))
    q = sealed["questions"][0]
    q.update(over)
    return {"notebook": "02", "title": "t", "questions": [q]}


def test_damaged_or_moved_seals_are_refused_naming_the_question():
    raw = _choice()
    opts = raw["questions"][0]["options"]
    opts[0]["feedback_sealed"], opts[1]["feedback_sealed"] = \
        opts[1]["feedback_sealed"], opts[0]["feedback_sealed"]
    with pytest.raises(BankError, match=r"question 1 \(02\.1\): 'options\[1\]\.feedback_sealed'"):
        parse_bank(raw, Path("02_x.yaml"))
    raw = _choice(salt="other")
    with pytest.raises(BankError, match="does not match"):
        parse_bank(raw, Path("02_x.yaml"))
    raw = _choice(explanation="plain too")
    with pytest.raises(BankError, match="not both"):
        parse_bank(raw, Path("02_x.yaml"))
    raw = _choice()
    del raw["questions"][0]["salt"]
    with pytest.raises(BankError, match="salt"):
        parse_bank(raw, Path("02_x.yaml"))

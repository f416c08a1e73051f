"""Question banks: every bank loads, answers are hidden, numbers come from the simulator."""
import re
from pathlib import Path

import pytest

from gpumemlab.quizkit.answers import hash_answer, matches
from gpumemlab.quizkit.bank import BankError, all_banks, load_bank, parse_bank, quizzes_dir
from gpumemlab.quizkit.compute import compute

ROOT = Path(__file__).resolve().parents[2]
BANKS = all_banks(ROOT / "quizzes")


def test_one_bank_per_curriculum_notebook():
    lessons = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [b.notebook for b in BANKS] == lessons
    assert lessons[:10] == [f"{i:02d}" for i in range(10)]


def test_the_docs_name_the_banks_that_exist():
    """docs/QUIZZES.md says which banks there are: the first and the last, as in quizzes/. It
    once said "00 to 14" while bank 15 shipped. A number no lesson has is named ("but for `11`")."""
    said = re.search(r"one bank per notebook, `(\d\d)` to `(\d\d)`(?:, but for `(\d\d)`)?",
                     (ROOT / "docs" / "QUIZZES.md").read_text(encoding="utf-8"))
    assert said, "docs/QUIZZES.md no longer says which banks exist"
    assert (said[1], said[2]) == (BANKS[0].notebook, BANKS[-1].notebook)
    missing = {said[3]} if said[3] else set()
    assert [b.notebook for b in BANKS] == [f"{i:02d}" for i in range(int(said[1]), int(said[2]) + 1)
                                           if f"{i:02d}" not in missing]


def test_the_loader_finds_the_banks_and_honours_the_env_override(monkeypatch, tmp_path):
    assert quizzes_dir().resolve() == (ROOT / "quizzes").resolve()
    monkeypatch.setenv("GPUMEMLAB_QUIZZES", str(tmp_path))
    with pytest.raises(BankError, match="no question bank for notebook '02'"):
        load_bank("02")


def test_a_bank_is_parsed_again_only_when_its_file_changes(tmp_path):
    src = (ROOT / "quizzes" / "02_fragmentation.yaml").read_text(encoding="utf-8")
    path = tmp_path / "02_fragmentation.yaml"
    path.write_text(src, encoding="utf-8")
    first = load_bank("02", tmp_path)
    assert load_bank("02", tmp_path) is first           # unchanged file: the parsed bank is kept
    path.write_text(src.replace(f"title: {first.title}", "title: A retitled bank"), encoding="utf-8")
    again = load_bank("02", tmp_path)
    assert again is not first and again.title == "A retitled bank"
    path.write_text("notebook: [", encoding="utf-8")
    with pytest.raises(BankError, match="not valid YAML"):
        load_bank("02", tmp_path)


def test_every_faq_question_of_the_article_is_asked():
    faq = " ".join(q.prompt.lower() for b in BANKS for q in b.questions if q.faq)
    for needle in ("what is \"gpu memory management and fragmentation\"",
                   "what is gpu memory fragmentation", "why do frameworks like pytorch use a "
                   "caching allocator", "5 gb free but cannot allocate a 2 gb tensor",
                   "letting memory segments grow", "pagedattention"):
        assert needle in faq, needle


def test_choice_answers_are_stored_hashed_and_exactly_one_option_is_right():
    for q in (q for b in BANKS for q in b.questions if q.kind == "choice"):
        assert "answer" not in q.data
        letters = "abcdefgh"[:len(q.data["options"])]
        right = [x for x in letters if matches(q.id, x, q.data["salt"], [q.data["answer_hash"]])]
        assert len(right) == 1, q.id


def test_answers_are_not_readable_in_the_bank_files():
    text = (ROOT / "quizzes" / "06_expandable_segments.yaml").read_text()
    assert "answer:" not in text and "answers:" not in text
    # the short answer only appears hashed
    assert not re.search(r"^\s*-\s*expandable_segments\s*$", text, re.M)


def test_numeric_answers_are_computed_by_the_simulated_gpu():
    from gpumemlab import SimulatedGPU

    gpu = SimulatedGPU("24GiB")
    keep = gpu.empty(1)
    q = load_bank("00").get("00.4")
    assert compute(q.data["compute"]) == gpu.memory_reserved()
    del keep
    for q in (q for b in BANKS for q in b.questions if q.kind == "numeric"):
        value = compute(q.data["compute"])
        assert isinstance(value, (int, float)) and value >= 0, q.id


def _bank(question):
    return {"notebook": "02", "title": "t", "questions": [question]}


@pytest.mark.parametrize("question, message", [
    ({"id": "03.1", "kind": "text", "prompt": "p", "salt": "s",
      "answer_hashes": ["0" * 64]}, "must start with the bank's notebook 02"),
    ({"id": "02.1", "kind": "essay", "prompt": "p"}, "'kind' must be one of"),
    ({"id": "02.1", "kind": "choice", "prompt": "p", "options": [{"text": "x"}],
      "salt": "s", "answer_hash": "0" * 64}, "2 to 8 items"),
    ({"id": "02.1", "kind": "choice", "prompt": "p", "options": [{"text": "x"}, {"text": "y"}],
      "salt": "s", "answer_hash": "b"}, "SHA-256 hex digest"),
    ({"id": "02.1", "kind": "numeric", "prompt": "p", "unit": "MiB",
      "compute": {"ops": ["a = lots"], "measure": "memory_reserved"}}, "cannot read op"),
    ({"id": "02.1", "kind": "numeric", "prompt": "p", "unit": "MiB",
      "compute": {"expr": "__import__('os')"}}, "may only use numbers"),
    ({"id": "02.1", "kind": "predict", "prompt": "p", "generator": "nope"},
     "unknown generator"),
    ({"id": "02.1", "kind": "text", "prompt": "p", "salt": "s", "answer_hashes": ["0" * 64],
      "answr": 1}, "unknown keys"),
])
def test_bad_banks_fail_with_a_message_naming_the_problem(question, message):
    with pytest.raises(BankError, match=re.escape(message)):
        parse_bank(_bank(question), Path("02_x.yaml"))


def test_hash_depends_on_question_salt_and_normalised_answer():
    h = hash_answer("02.1", " (B) ", "salt")
    assert h == hash_answer("02.1", "b", "salt")
    assert h != hash_answer("02.2", "b", "salt") and h != hash_answer("02.1", "b", "pepper")


# ---- keys fixed in issue 18: the right option checks right, the claim once keyed checks wrong
def _letter(question, text_start):
    options = question.data["options"]
    found = [x for x, o in zip("abcdefgh", options) if o["text"].startswith(text_start)]
    assert len(found) == 1, (question.id, text_start)
    return found[0]


@pytest.mark.parametrize("qid, right, once_keyed", [
    # reserved - allocated holds no rounding slack: a live block is counted whole in allocated
    ("03.1", "The bytes in cached free blocks", "Rounding slack"),
    # the OOM retry frees whole free segments; free pieces of split segments stay
    ("04.4", "When a cudaMalloc fails: it frees the cached segments that hold no live tensor",
     "When a cudaMalloc fails: it frees every cached free block"),
    # a fragmentation-driven OOM is fixed by a setting, not by cutting demand
    ("07.3", "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "Lower the batch size"),
    # paging leaves internal fragmentation: a sequence's last page is partly empty
    ("08.1", "It stores the KV cache in fixed-size pages",
     "It makes the KV pool free of fragmentation of every kind"),
    # 09.4 asks about the allocator (the test at the OOM), not for an opinion
    ("09.4", "The live tensors plus the request would fit", "memory_allocated() plus the request"),
])
def test_fixed_keys(qid, right, once_keyed):
    from gpumemlab.quizkit.checker import evaluate

    q = load_bank(qid[:2]).get(qid)
    assert evaluate(q, _letter(q, right)).correct
    assert not evaluate(q, _letter(q, once_keyed)).correct


def test_fixed_explanations_say_what_c10_does():
    release = load_bank("04").get("04.4").explanation
    assert "max_split_size_mb" in release and "one fitting cached block" not in release
    paging = load_bank("08").get("08.1").explanation
    assert "internal fragmentation" in paging and "impossible" not in paging
    gap = load_bank("03").get("03.1").explanation
    assert "allocated counts it" in gap


def test_reserved_minus_allocated_is_the_free_blocks_and_rounding_is_inside_allocated():
    # what 03.1 keys, measured: rounding slack is allocated - requested, never reserved - allocated
    from gpumemlab import SimulatedGPU

    gpu = SimulatedGPU("8GiB", alloc_conf="")
    held = [gpu.empty(n) for n in (1, 700_001, 19 * 1024**2 + 3)]  # the last: an unsplit 20 MiB
    stats = gpu.memory_stats()
    free_blocks = sum(b["size"] for s in gpu.memory_snapshot() for b in s["blocks"]
                      if b["state"] == "inactive")
    assert gpu.memory_reserved() - gpu.memory_allocated() == free_blocks
    slack = stats["allocated_bytes.all.current"] - stats["requested_bytes.all.current"]
    assert slack > 1024**2    # the 19 MiB tensor's block is the whole 20 MiB segment
    del held

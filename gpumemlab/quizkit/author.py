"""Authoring helper: turn a clear draft into the sealed bank learners receive.

    python -m gpumemlab.quizkit.author seal DRAFT.yaml > quizzes/02_fragmentation.yaml
    python -m gpumemlab.quizkit.author unseal quizzes/02_fragmentation.yaml > DRAFT.yaml
    python -m gpumemlab.quizkit.author check quizzes/         # validate; fail on plain fields
    python -m gpumemlab.quizkit.author hash 02.3 b            # prints salt and hash lines
    python -m gpumemlab.quizkit.author renumber BANK.yaml 15 17   # a lesson renumbered

A draft is a bank written in clear: ``answer: b`` (choice) or ``answers: [x, y]`` (text),
each option's ``feedback``, ``hints`` and ``explanation`` in plain text. ``seal`` gives every
question a ``salt`` (keeping one already there), replaces the answers by ``answer_hash`` /
``answer_hashes`` and the readable fields by ``feedback_sealed`` / ``hints_sealed`` /
``explanation_sealed`` (see ``answers.seal_field``). Key order, the leading comment lines and all
other fields are kept; fields already sealed pass through, so sealing twice changes nothing.
``unseal`` does the reverse for feedback, hints and explanation (answers stay hashed), to edit a
shipped bank. Keep drafts out of what learners receive.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .answers import hash_answer, new_salt, normalise_text, seal_field, SealError, unseal_field
from .bank import all_banks, BankError, parse_bank, plain_fields

_LETTERS = "abcdefgh"


def _header(text: str) -> str:
    """The comment lines (and blank lines) before the first YAML line."""
    lines = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            break
        lines.append(line)
    return "".join(line + "\n" for line in lines)


def _dump(header: str, raw) -> str:
    import yaml

    return header + yaml.safe_dump(raw, sort_keys=False, width=100, allow_unicode=True)


def _load(text: str):
    import yaml

    raw = yaml.safe_load(text)
    if not isinstance(raw, dict) or not isinstance(raw.get("questions"), list):
        raise ValueError("a bank must be a mapping with a 'questions' list")
    return raw


def seal_question(q: dict, salt_factory=new_salt) -> dict:
    """One draft question (a mapping) with answers hashed and readable fields sealed."""
    if not isinstance(q, dict) or not isinstance(q.get("id"), str):
        raise ValueError(f"every question needs an 'id' (got {q!r:.60})")
    qid = q["id"]
    if "answer" in q and "answers" in q:
        raise ValueError(f"{qid}: give 'answer' or 'answers', not both")
    salt = str(q["salt"]) if "salt" in q else None
    needs_salt = any(k in q for k in ("answer", "answers", "hints", "explanation")) or any(
        isinstance(o, dict) and "feedback" in o for o in q.get("options") or [])
    if salt is None and needs_salt:
        salt = salt_factory()
    out = {}
    for key, value in q.items():
        if key in ("answer", "answers", "hints", "explanation") and "salt" not in out:
            out["salt"] = salt
        if key == "salt":
            out.setdefault("salt", salt)
        elif key == "answer":
            out["answer_hash"] = hash_answer(qid, str(value), salt)
        elif key == "answers":
            values = value if isinstance(value, list) else [value]
            spellings = list(dict.fromkeys(normalise_text(str(a)) for a in values))
            out["answer_hashes"] = [hash_answer(qid, a, salt) for a in spellings]
        elif key == "hints":
            out["hints_sealed"] = [seal_field(qid, salt, f"hint:{i}", str(h).strip())
                                   for i, h in enumerate(value or [], 1)]
        elif key == "explanation":
            out["explanation_sealed"] = seal_field(qid, salt, "explanation", str(value).strip())
        elif key == "options" and isinstance(value, list):
            out["options"] = [_seal_option(qid, salt, i, o) for i, o in enumerate(value)]
        else:
            out[key] = value
    if salt is not None and "salt" not in out:
        out["salt"] = salt
    return out


def _seal_option(qid, salt, index, opt):
    if not isinstance(opt, dict) or "feedback" not in opt:
        return opt
    return {("feedback_sealed" if k == "feedback" else k):
            (seal_field(qid, salt, f"feedback:{_LETTERS[index]}", str(v).strip())
             if k == "feedback" else v) for k, v in opt.items()}


def unseal_question(q: dict) -> dict:
    """The reverse of ``seal_question`` for feedback, hints and explanation (not for answers)."""
    qid, salt, out = q["id"], str(q.get("salt", "")), {}
    for key, value in q.items():
        if key == "hints_sealed":
            out["hints"] = [unseal_field(qid, salt, f"hint:{i}", h)
                            for i, h in enumerate(value, 1)]
        elif key == "explanation_sealed":
            out["explanation"] = unseal_field(qid, salt, "explanation", value)
        elif key == "options" and isinstance(value, list):
            out["options"] = [
                {("feedback" if k == "feedback_sealed" else k):
                 (unseal_field(qid, salt, f"feedback:{_LETTERS[i]}", v)
                  if k == "feedback_sealed" else v) for k, v in o.items()}
                if isinstance(o, dict) else o for i, o in enumerate(value)]
        else:
            out[key] = value
    return out


def seal_text(text: str, salt_factory=new_salt) -> str:
    """A draft bank's YAML text, sealed (the result is validated before it is returned)."""

    raw = _load(text)
    raw["questions"] = [seal_question(q, salt_factory) for q in raw["questions"]]
    sealed = _dump(_header(text), raw)
    parse_bank(_load(sealed), Path("sealed.yaml"))   # raises BankError naming the problem
    return sealed


def unseal_text(text: str) -> str:
    """A sealed bank's YAML text with feedback, hints and explanation readable again."""
    raw = _load(text)
    raw["questions"] = [unseal_question(q) for q in raw["questions"]]
    return _dump(_header(text), raw)


def renumber_text(text: str, old: str, new: str) -> str:
    """A sealed bank moved from lesson ``old`` to lesson ``new``: ids ``old.K`` become ``new.K`` and
    ``notebook`` becomes ``new``. Seals and hashes are keyed by the id, so each sealed field is
    opened under the old id and sealed again under the new one (same salt, same text); a choice
    answer is found by hashing each letter under the old id. A text question's accepted
    spellings are not in the bank, so a bank with one is refused."""
    raw = _load(text)
    questions = []
    for q in raw["questions"]:
        qid = q["id"]
        if not qid.startswith(old + "."):
            raise ValueError(f"{qid} is not a question of lesson {old}")
        draft = {}
        for key, value in unseal_question(q).items():
            if key == "id":
                draft["id"] = new + qid[len(old):]
            elif key == "answer_hash":
                letters = [c for c in _LETTERS[:len(q.get("options") or [])]
                           if hash_answer(qid, c, str(q["salt"])) == value]
                if len(letters) != 1:
                    raise ValueError(f"{qid}: no single option matches its answer hash")
                draft["answer"] = letters[0]
            elif key == "answer_hashes":
                raise ValueError(f"{qid}: a text question's answers cannot be moved without them")
            else:
                draft[key] = value
        questions.append(seal_question(draft))
    raw["questions"] = questions
    raw["notebook"] = new
    header = _header(text).replace(f"notebook {old}:", f"notebook {new}:")
    sealed = _dump(header, raw)
    parse_bank(_load(sealed), Path("renumbered.yaml"))
    return sealed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpumemlab.quizkit.author")
    sub = parser.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hash", help="print the salt and hash of one answer")
    h.add_argument("question_id")
    h.add_argument("answer")
    h.add_argument("--salt", default=None)
    s = sub.add_parser("seal", help="hash the answers and seal feedback, hints and "
                                    "explanations of a draft bank")
    s.add_argument("draft", type=Path)
    u = sub.add_parser("unseal", help="make feedback, hints and explanations of a sealed bank "
                                      "readable again, to edit it (answers stay hashed)")
    u.add_argument("bank", type=Path)
    r = sub.add_parser("renumber", help="move a sealed bank to another lesson number: its ids "
                                        "and seals, printed")
    r.add_argument("bank", type=Path)
    r.add_argument("old")
    r.add_argument("new")
    c = sub.add_parser("check", help="load and validate every bank in a folder; fail if one "
                                     "still has readable feedback, hints or explanations")
    c.add_argument("folder", type=Path)
    c.add_argument("--allow-plain", action="store_true",
                   help="accept readable feedback/hints/explanations (drafts being edited)")
    args = parser.parse_args(argv)
    if args.cmd == "hash":
        salt = args.salt or new_salt()
        print(f"salt: {salt}\nanswer_hash: {hash_answer(args.question_id, args.answer, salt)}")
    elif args.cmd == "renumber":
        try:
            sys.stdout.write(renumber_text(args.bank.read_text(encoding="utf-8"), args.old, args.new))
        except (OSError, ValueError, KeyError, BankError, SealError) as exc:
            print(f"error: {args.bank.name}: {exc}", file=sys.stderr)
            return 1
    elif args.cmd in ("seal", "unseal"):

        path = args.draft if args.cmd == "seal" else args.bank
        try:
            text = path.read_text(encoding="utf-8")
            out = seal_text(text) if args.cmd == "seal" else unseal_text(text)
        except (OSError, ValueError, KeyError, BankError, SealError) as exc:
            print(f"error: {path.name}: {exc}", file=sys.stderr)
            return 1
        sys.stdout.write(out)
    else:

        try:
            banks = all_banks(args.folder)
        except BankError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        status = 0
        for bank in banks:
            plain = [f"{q.id} {f}" for q in bank.questions for f in plain_fields(q)]
            state = "sealed" if not plain else f"NOT SEALED ({', '.join(plain[:4])}" + \
                (f", {len(plain) - 4} more" if len(plain) > 4 else "") + ")"
            print(f"{bank.path.name}: {len(bank.questions)} questions, "
                  f"{sum(q.faq for q in bank.questions)} FAQ, {state}")
            if plain and not args.allow_plain:
                status = 1
        if status:
            print("error: readable feedback/hints/explanations left; run "
                  "python -m gpumemlab.quizkit.author seal", file=sys.stderr)
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())

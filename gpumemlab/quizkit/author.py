"""Authoring helper: turn clear-text answers into the salted hashes a bank stores.

    python -m gpumemlab.quizkit.author hash 02.3 b            # prints salt and hash lines
    python -m gpumemlab.quizkit.author seal draft.yaml > quizzes/02_fragmentation.yaml
    python -m gpumemlab.quizkit.author check quizzes/         # validate every bank

``seal`` rewrites, line by line, ``answer: b`` into ``salt:`` + ``answer_hash:`` and
``answers: [x, y]`` into ``salt:`` + ``answer_hashes:``, keeping comments and layout. Keep the
draft (with clear answers) out of what learners receive.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .answers import hash_answer, new_salt, normalise_text

_ID_LINE = re.compile(r"^\s*-?\s*id:\s*[\"']?(\d\d\.\d+)[\"']?\s*$")
_ANSWER = re.compile(r"^(\s*)answer:\s*(.+?)\s*$")
_ANSWERS = re.compile(r"^(\s*)answers:\s*\[(.*)\]\s*$")
_ANSWERS_BLOCK = re.compile(r"^(\s*)answers:\s*$")
_ITEM = re.compile(r"^(\s*)-\s+(.+?)\s*$")


def _unquote(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def seal_text(text: str, salt_factory=new_salt) -> str:
    """Replace clear answers by salted hashes in a bank's YAML text."""
    out, qid = [], None
    lines = _fold_block_lists(text.splitlines())
    for lineno, line in enumerate(lines, 1):
        m = _ID_LINE.match(line)
        if m:
            qid = m.group(1)
        m1, m2 = _ANSWER.match(line), _ANSWERS.match(line)
        if (m1 or m2) and qid is None:
            raise ValueError(f"line {lineno}: an answer before any question id")
        if m1:
            indent, salt = m1.group(1), salt_factory()
            out += [f"{indent}salt: {salt}",
                    f"{indent}answer_hash: {hash_answer(qid, _unquote(m1.group(2)), salt)}"]
        elif m2:
            indent, salt = m2.group(1), salt_factory()
            answers = [_unquote(a) for a in m2.group(2).split(",") if a.strip()]
            answers = list(dict.fromkeys(normalise_text(a) for a in answers))
            out += [f"{indent}salt: {salt}", f"{indent}answer_hashes:"]
            out += [f"{indent}  - {hash_answer(qid, a, salt)}" for a in answers]
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _fold_block_lists(lines):
    """Rewrite a block-style ``answers:`` list (one ``- item`` a line) into flow style."""
    out, i = [], 0
    while i < len(lines):
        m = _ANSWERS_BLOCK.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        items, i = [], i + 1
        while i < len(lines) and _ITEM.match(lines[i]) and \
                len(_ITEM.match(lines[i]).group(1)) >= len(m.group(1)):
            items.append(_ITEM.match(lines[i]).group(2))
            i += 1
        out.append(f"{m.group(1)}answers: [{', '.join(items)}]")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpumemlab.quizkit.author")
    sub = parser.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hash", help="print the salt and hash of one answer")
    h.add_argument("question_id")
    h.add_argument("answer")
    h.add_argument("--salt", default=None)
    s = sub.add_parser("seal", help="replace clear answers in a draft bank by hashes")
    s.add_argument("draft", type=Path)
    c = sub.add_parser("check", help="load and validate every bank in a folder")
    c.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "hash":
        salt = args.salt or new_salt()
        print(f"salt: {salt}\nanswer_hash: {hash_answer(args.question_id, args.answer, salt)}")
    elif args.cmd == "seal":
        sys.stdout.write(seal_text(args.draft.read_text(encoding="utf-8")))
    else:
        from .bank import BankError, all_banks

        try:
            banks = all_banks(args.folder)
        except BankError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        for bank in banks:
            print(f"{bank.path.name}: {len(bank.questions)} questions, "
                  f"{sum(q.faq for q in bank.questions)} FAQ")
    return 0


if __name__ == "__main__":
    sys.exit(main())

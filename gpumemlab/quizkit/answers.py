"""Answer normalisation and salted hashes: how a bank stores an answer without revealing it.

A bank never holds a multiple-choice letter or a short answer in clear text. It holds
``sha256(salt + "|" + question_id + "|" + normalised_answer)`` and the salt. The question id is
mixed in so that one hash cannot be copied to another question. A four-option question can still
be brute-forced by trying every letter; the hash keeps answers out of sight, it is not a secret.
"""
from __future__ import annotations

import hashlib
import re
import secrets

_SPACES = re.compile(r"\s+")
# Wrapping punctuation learners type around an answer ("(b)", "'expandable_segments'", "b)").
_WRAPPERS = "\"'`()[]{}.,;: "


def normalise_text(answer) -> str:
    """Lower-case, trim, collapse inner whitespace and drop wrapping quotes or brackets."""
    if not isinstance(answer, str):
        raise TypeError(f"expected a string answer, got {type(answer).__name__}")
    text = _SPACES.sub(" ", answer.strip().lower())
    return text.strip(_WRAPPERS)


def hash_answer(question_id: str, answer: str, salt: str) -> str:
    """The salted SHA-256 hex digest a bank stores for ``answer`` (normalised first)."""
    payload = f"{salt}|{question_id}|{normalise_text(answer)}"
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def new_salt() -> str:
    """A fresh random salt for a question being authored."""
    return secrets.token_hex(8)


def matches(question_id: str, answer: str, salt: str, hashes) -> bool:
    """Whether ``answer`` hashes to one of ``hashes`` (constant-time comparison each)."""
    digest = hash_answer(question_id, answer, salt)
    return any(secrets.compare_digest(digest, h) for h in hashes)

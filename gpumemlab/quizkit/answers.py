"""Answer normalisation, salted hashes and sealed text: how a bank keeps answers out of sight.

A bank never holds a multiple-choice letter or a short answer in clear text. It holds
``sha256(salt + "|" + question_id + "|" + normalised_answer)`` and the salt. The question id is
mixed in so that one hash cannot be copied to another question.

Text that would give the answer away (each option's feedback, the hints, the explanation) is
stored *sealed*: ``base64(tag + ciphertext)``, where the ciphertext is the UTF-8 text XORed with a
SHA-256 keystream and the tag is 8 bytes of an HMAC-SHA-256 over the ciphertext. Both are keyed
by ``sha256(PEPPER, salt, question_id, purpose)``; ``purpose`` names the field ("explanation",
"feedback:b", "hint:2"), so sealed text cannot be moved to another question or option unnoticed.
Banks are checked (tag only) when loaded; text is decoded only when it is shown.

Honest limit: the pepper ships with the kit, so this keeps answers out of *casual reading*
(opening or grepping a bank file), not away from someone who runs code. A four-option question
can always be brute-forced by hashing every letter; graded work goes through ``gpumemlab grade``
and its hidden tests instead.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
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


# -- sealed text --------------------------------------------------------------------------------

PEPPER = b"gpumemlab/quizkit/seal/v1: out of casual reading, not a secret"
TAG_BYTES = 8


class SealError(ValueError):
    """Sealed text that is not valid base64, or whose tag does not match its place."""


def _seal_key(question_id: str, salt: str, purpose: str) -> bytes:
    parts = [PEPPER] + [str(x).encode("utf-8") for x in (salt, question_id, purpose)]
    return hashlib.sha256(b"\x00".join(parts)).digest()


def _keystream(key: bytes, n: int) -> bytes:
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(key + b"stream" + counter.to_bytes(8, "big")).digest()
        counter += 1
    return bytes(out[:n])


def _tag(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, b"tag" + body, hashlib.sha256).digest()[:TAG_BYTES]


def seal_field(question_id: str, salt: str, purpose: str, text: str) -> str:
    """``text`` sealed for field ``purpose`` of a question: base64 of tag + XORed UTF-8 bytes."""
    if not isinstance(text, str):
        raise TypeError(f"expected text to seal, got {type(text).__name__}")
    key = _seal_key(question_id, salt, purpose)
    plain = text.encode("utf-8")
    body = bytes(a ^ b for a, b in zip(plain, _keystream(key, len(plain))))
    return base64.b64encode(_tag(key, body) + body).decode("ascii")


def _open(question_id, salt, purpose, sealed):
    if not isinstance(sealed, str):
        raise SealError(f"sealed {purpose} must be a base64 string")
    try:
        raw = base64.b64decode(sealed.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise SealError(f"sealed {purpose} is not valid base64") from None
    key = _seal_key(question_id, salt, purpose)
    tag, body = raw[:TAG_BYTES], raw[TAG_BYTES:]
    if len(raw) < TAG_BYTES or not hmac.compare_digest(tag, _tag(key, body)):
        raise SealError(f"sealed {purpose} does not match this question (damaged, edited by hand, "
                        f"or moved from another question/option: re-seal the draft)")
    return key, body


def check_sealed(question_id: str, salt: str, purpose: str, sealed: str) -> None:
    """Raise SealError unless ``sealed`` was made for this question, salt and field.

    Only the tag is checked; nothing is decoded."""
    _open(question_id, salt, purpose, sealed)


def unseal_field(question_id: str, salt: str, purpose: str, sealed: str) -> str:
    """The text ``seal_field`` sealed; raises SealError if it was damaged or moved."""
    key, body = _open(question_id, salt, purpose, sealed)
    plain = bytes(a ^ b for a, b in zip(body, _keystream(key, len(body))))
    try:
        return plain.decode("utf-8")
    except UnicodeDecodeError:   # pragma: no cover - the tag already vouches for the bytes
        raise SealError(f"sealed {purpose} is not UTF-8 text") from None

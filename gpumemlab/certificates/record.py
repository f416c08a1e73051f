"""Course certificates: signed by the teacher's Ed25519 key, or an unsigned self-study record.

A certificate is a small JSON record::

    {"format": "gpumemlab-certificate/1", "algorithm": "Ed25519", "signature": "<base64>",
     "payload": {"kind": "signed", "name", "course", "score", "max_score", "percent", "date",
                 "issuer", "key_fingerprint", "id"}}

The signature covers the canonical JSON of the payload (sorted keys, no spaces, UTF-8). The ID is
the first 80 bits of SHA-256 of the payload *without* its ``id``, in base32, grouped
``XXXX-XXXX-XXXX-XXXX``: short enough to type, and bound to every other field. Self-study records
have ``kind: "self-study"`` and no signature; they can never verify.

The record travels inside the HTML page (a ``<script type="application/json">`` block), inside the
PNG (a text chunk) and as a ``.json`` sidecar. Verification only parses JSON; it never runs
anything from the file. For HTML it also re-renders the page from the verified record and requires
the file to match, so editing only the visible text fails too.
"""
from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "gpumemlab-certificate/1"
ALGORITHM = "Ed25519"
MAX_FILE_BYTES = 4 * 1024 * 1024
_FIELDS = {"kind": str, "name": str, "course": str, "score": (int, float),
           "max_score": (int, float), "percent": (int, float), "date": str, "issuer": str,
           "key_fingerprint": str, "id": str}


from gpumemlab.recordings.bounded_read import read_regular_file  # noqa: E402

from .keys import (CertificateError, generate_keypair, key_fingerprint,  # noqa: F401
                   load_private_key, load_public_key)
from .render import extract_from_html, extract_from_png, html_mismatch, render_html, render_png


@dataclass
class Certificate:
    payload: dict
    signature: str | None = None              # base64 Ed25519 signature, None when unsigned

    @property
    def signed(self) -> bool:
        return self.signature is not None and self.payload.get("kind") == "signed"

    @property
    def id(self) -> str:
        return self.payload["id"]

    def to_dict(self) -> dict:
        return {"format": FORMAT, "algorithm": ALGORITHM if self.signature else None,
                "signature": self.signature, "payload": self.payload}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True, ensure_ascii=True)

    def summary(self) -> str:
        p = self.payload
        return (f"{p['name']}, {p['course']}, {_num(p['score'])}/{_num(p['max_score'])} "
                f"({_num(p['percent'])}%), {p['date']}, ID {p['id']}")

    def write(self, out_dir, stem: str, png: bool = True) -> dict:
        """Write ``stem.html``, ``stem.json`` and (by default) ``stem.png``; return the paths."""

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"html": out / f"{stem}.html", "json": out / f"{stem}.json"}
        paths["html"].write_text(render_html(self), encoding="utf-8", newline="\n")
        paths["json"].write_text(self.to_json() + "\n", encoding="utf-8")
        if png:
            paths["png"] = out / f"{stem}.png"
            render_png(self, paths["png"])
        return paths


@dataclass
class VerifyResult:
    valid: bool
    reason: str
    certificate: Certificate | None = None
    notes: list = field(default_factory=list)

    def line(self) -> str:
        return re.sub(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", "?", self._line())

    def _line(self) -> str:
        if self.valid:
            p = self.certificate.payload
            by = f", signed by {p['issuer']}" if p.get("issuer") else ""
            extra = "".join(f"; {n}" for n in self.notes)
            return f"valid: {self.certificate.summary()}{by} (key {p['key_fingerprint']}){extra}"
        return f"INVALID: {self.reason}"

    def __bool__(self):
        return self.valid


# -- records -----------------------------------------------------------------------------------

def canonical(payload: dict) -> bytes:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, allow_nan=False).encode("utf-8")


def compute_id(payload: dict) -> str:
    body = {k: v for k, v in payload.items() if k != "id"}
    code = base64.b32encode(hashlib.sha256(canonical(body)).digest()).decode()[:16]
    return "-".join(code[i:i + 4] for i in range(0, 16, 4))


def _clean_text(value, what: str, limit: int = 200) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CertificateError(f"{what} must be a non-empty string")
    value = " ".join(value.split())
    if len(value) > limit or re.search(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]",
                                       value):
        raise CertificateError(f"{what} must be at most {limit} printable characters")
    return value


def _payload(kind, name, course, score, max_score, date, issuer, fingerprint) -> dict:
    for v, what in ((score, "score"), (max_score, "max_score")):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise CertificateError(f"{what} must be a finite number")
    if max_score <= 0 or not 0 <= score <= max_score:
        raise CertificateError(f"score must lie in 0..max_score, got {score}/{max_score}")
    if date is None:
        date = _dt.date.today()
    if isinstance(date, _dt.datetime):
        date = date.date()
    if not isinstance(date, _dt.date):
        try:
            date = _dt.date.fromisoformat(str(date).strip())
        except ValueError:
            raise CertificateError(f"date must be YYYY-MM-DD, got {date!r}") from None
    p = {"kind": kind, "name": _clean_text(name, "name"),
         "course": _clean_text(course, "course"),
         "score": _plain(score), "max_score": _plain(max_score),
         "percent": round(100.0 * score / max_score, 1), "date": date.isoformat(),
         "issuer": _clean_text(issuer, "issuer") if issuer else "",
         "key_fingerprint": fingerprint}
    p["id"] = compute_id(p)
    return p


def issue_certificate(name, course, score, max_score, date=None, private_key=None,
                      issuer: str = "") -> Certificate:
    """A signed certificate. ``private_key``: an Ed25519 key object, PEM bytes or a PEM path."""
    if private_key is None:
        raise CertificateError("a signed certificate needs the teacher's private key")
    key = load_private_key(private_key)
    payload = _payload("signed", name, course, score, max_score, date, issuer,
                       key_fingerprint(key.public_key()))
    signature = base64.b64encode(key.sign(canonical(payload))).decode("ascii")
    return Certificate(payload, signature)


def completion_record(name, course, score, max_score, date=None) -> Certificate:
    """An unsigned self-study completion record: says what it is, and never verifies."""
    return Certificate(_payload("self-study", name, course, score, max_score, date, "", ""))


# -- loading and verifying ---------------------------------------------------------------------

def certificate_from_dict(data) -> Certificate:
    """Check the record's shape (types only; not whether it is genuine)."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CertificateError(f"not a gpumemlab certificate (expected format {FORMAT!r})")
    payload, sig = data.get("payload"), data.get("signature")
    if not isinstance(payload, dict) or set(payload) != set(_FIELDS):
        raise CertificateError("certificate payload is missing fields or has extra ones")
    for key, types in _FIELDS.items():
        v = payload[key]
        if isinstance(v, bool) or not isinstance(v, types) or len(str(v)) > 400:
            raise CertificateError(f"certificate field {key!r} has the wrong type or size")
    if sig is not None and (not isinstance(sig, str) or len(sig) > 200):
        raise CertificateError("certificate signature must be a base64 string")
    return Certificate(dict(payload), sig)


def load_certificate(path):
    """(Certificate, source kind, file text or None) from a .html, .json or .png file."""

    path = Path(path)
    data = read_regular_file(str(path), MAX_FILE_BYTES, CertificateError, "certificate")
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return certificate_from_dict(_parse_json(extract_from_png(data), path)), "png", None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CertificateError(f"{path}: neither UTF-8 text nor a PNG image") from None
    if text.lstrip().startswith("{"):
        return certificate_from_dict(_parse_json(text, path)), "json", None
    return certificate_from_dict(_parse_json(extract_from_html(text), path)), "html", text


def _parse_json(text: str, path):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CertificateError(f"{path}: the certificate data is not valid JSON "
                               f"({str(exc)[:80]})") from None


def verify_certificate(path_or_record, public_key) -> VerifyResult:
    """Check a certificate file (.html, .json, .png) or record against the teacher's public key.

    Raises CertificateError when the file is not a certificate at all or the key is unusable;
    otherwise returns a result whose ``valid`` is False with a reason for any unsigned, edited,
    or foreign certificate."""
    from cryptography.exceptions import InvalidSignature

    source, page = "record", None
    if isinstance(path_or_record, Certificate):
        cert = path_or_record
    elif isinstance(path_or_record, dict):
        cert = certificate_from_dict(path_or_record)
    else:
        cert, source, page = load_certificate(path_or_record)
    key = load_public_key(public_key)
    p = cert.payload
    if p["kind"] != "signed" or cert.signature is None:
        return VerifyResult(False, "unsigned self-study completion record: it is not signed "
                            "and cannot be verified", cert)
    fp = key_fingerprint(key)
    if p["key_fingerprint"] != fp:
        return VerifyResult(False, f"signed with another key (certificate names key "
                            f"{p['key_fingerprint']}, this key is {fp})", cert)
    try:
        sig = base64.b64decode(cert.signature, validate=True)
        key.verify(sig, canonical(p))
    except (ValueError, InvalidSignature):
        return VerifyResult(False, "the signature does not match: the certificate was changed "
                            "after signing, or was not signed with this key", cert)
    if compute_id(p) != p["id"]:
        return VerifyResult(False, "the ID does not match the certificate's contents", cert)
    if p["percent"] != round(100.0 * p["score"] / p["max_score"], 1):
        return VerifyResult(False, "the percentage does not match the score", cert)
    notes = []
    if source == "html":

        problem = html_mismatch(cert, page)
        if problem:
            return VerifyResult(False, problem, cert)
    elif source == "png":
        notes.append("the PNG's embedded record is genuine; compare the picture with these "
                     "values (pixels are not signed)")
    return VerifyResult(True, "signature valid", cert, notes)


def _plain(x):
    return int(x) if float(x).is_integer() else float(x)


def _num(x) -> str:
    return f"{x:g}"

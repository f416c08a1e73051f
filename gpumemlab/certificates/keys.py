"""Ed25519 keys for certificates: generate, load (PEM), fingerprint.

The private key is written unencrypted with mode 0600: keep it off shared drives. The public key
(``*.pub.pem``) is what you publish so that anyone can verify certificates you issued.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from gpumemlab.recordings.bounded_read import read_regular_file

PRIVATE_NAME, PUBLIC_NAME = "certificate_signing_key.pem", "certificate_signing_key.pub.pem"


class CertificateError(ValueError):
    """A file or key that is not a usable certificate or key (one line, for the CLI)."""


def generate_keypair(out_dir, overwrite: bool = False) -> tuple:
    """Write a new Ed25519 private key (mode 0600) and its public key as PEM files."""
    from cryptography.hazmat.primitives import serialization as ser
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    priv_path, pub_path = out / PRIVATE_NAME, out / PUBLIC_NAME
    if not overwrite and (priv_path.exists() or pub_path.exists()):
        raise CertificateError(f"{priv_path} or {pub_path} already exists (refusing to "
                               f"overwrite a signing key)")
    key = Ed25519PrivateKey.generate()
    priv = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
    pub = key.public_key().public_bytes(ser.Encoding.PEM, ser.PublicFormat.SubjectPublicKeyInfo)
    if overwrite and priv_path.exists():
        priv_path.unlink()
    fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(priv)
    os.chmod(priv_path, 0o600)
    pub_path.write_bytes(pub)
    return priv_path, pub_path


def _read_key_bytes(key) -> bytes:
    if isinstance(key, bytes):
        return key
    # by its size, without blocking: a key path may name /dev/zero or a FIFO too
    return read_regular_file(str(Path(key)), 64 * 1024, CertificateError, "PEM key")


def load_private_key(key):
    """An Ed25519 private key from a key object, PEM bytes or a PEM file path."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    if isinstance(key, Ed25519PrivateKey):
        return key
    label = "the key" if isinstance(key, bytes) else str(key)
    try:
        obj = load_pem_private_key(_read_key_bytes(key), password=None)
    except TypeError:
        raise CertificateError(f"{label}: password-protected keys are not supported") from None
    except ValueError:
        raise CertificateError(f"{label}: not a PEM private key (use the key written by "
                               f"'gpumemlab certificate keygen')") from None
    if not isinstance(obj, Ed25519PrivateKey):
        raise CertificateError(f"{label}: not an Ed25519 private key")
    return obj


def load_public_key(key):
    """An Ed25519 public key from a key object, PEM bytes or a PEM file (a private key is
    accepted too: its public half is used)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (Ed25519PrivateKey,
                                                                   Ed25519PublicKey)
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    if isinstance(key, Ed25519PublicKey):
        return key
    if isinstance(key, Ed25519PrivateKey):
        return key.public_key()
    label = "the key" if isinstance(key, bytes) else str(key)
    data = _read_key_bytes(key)
    if b"PRIVATE KEY" in data:
        return load_private_key(key).public_key()
    try:
        obj = load_pem_public_key(data)
    except (ValueError, TypeError):
        raise CertificateError(f"{label}: not a PEM public key (use the .pub.pem written by "
                               f"'gpumemlab certificate keygen')") from None
    if not isinstance(obj, Ed25519PublicKey):
        raise CertificateError(f"{label}: not an Ed25519 public key")
    return obj


def key_fingerprint(public_key) -> str:
    """SHA-256 of the raw public key, first 64 bits in hex: ``ab12:cd34:ef56:7890``."""
    from cryptography.hazmat.primitives import serialization as ser

    raw = load_public_key(public_key).public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    h = hashlib.sha256(raw).hexdigest()[:16]
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))

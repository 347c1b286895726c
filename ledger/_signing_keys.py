"""Ed25519 keys for signed decisions: made, written and read as PEM files on the decider's
machine, and public keys as a policy writes them (``ed25519:<base64 or hex>``).

The ``cryptography`` package (extra ``signing``) is imported only when a key is made or
read, or a signature made or checked (:mod:`._signatures`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import InvalidRequest

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

#: How a public key is written in a policy: ``ed25519:`` and the raw 32-byte key.
KEY_PREFIX = "ed25519:"
#: The extra that brings ``cryptography``.
EXTRA = "signing"
_PUBLIC_KEY_BYTES = 32


def crypto() -> tuple[type[Ed25519PrivateKey], type[Ed25519PublicKey]]:
    """``cryptography``'s Ed25519 private and public key classes, or an ImportError naming
    the extra."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:
        raise ImportError(
            "signed decisions need the cryptography package: "
            f"pip install 'temporal-ledger[{EXTRA}]'"
        ) from exc
    return ed25519.Ed25519PrivateKey, ed25519.Ed25519PublicKey


def parse_public_key(text: Any) -> bytes:
    """The raw 32 bytes of ``ed25519:<base64 or hex>``; :class:`InvalidRequest` if not."""
    if not isinstance(text, str) or not text.startswith(KEY_PREFIX):
        raise InvalidRequest(
            f"a public key is written {KEY_PREFIX}<base64 or hex of 32 bytes>, got {text!r}"
        )
    body = text.removeprefix(KEY_PREFIX).strip()
    raw: bytes | None = None
    if len(body) == 2 * _PUBLIC_KEY_BYTES:
        try:
            raw = bytes.fromhex(body)
        except ValueError:
            raw = None
    if raw is None:
        # Standard or URL-safe base64, padded or not.
        padded = body.replace("-", "+").replace("_", "/") + "=" * (-len(body) % 4)
        try:
            raw = base64.b64decode(padded, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidRequest(f"public key {text!r}: not base64 or hex") from None
    if len(raw) != _PUBLIC_KEY_BYTES:
        raise InvalidRequest(
            f"public key {text!r}: an Ed25519 public key is {_PUBLIC_KEY_BYTES} bytes, "
            f"this is {len(raw)}"
        )
    return raw


def public_key_text(raw: bytes) -> str:
    """A public key as the policy writes it."""
    return KEY_PREFIX + base64.b64encode(raw).decode()


def key_id(raw: bytes) -> str:
    """A public key's short name: the first 16 hex digits of its SHA-256."""
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_private_key() -> Ed25519PrivateKey:
    """A new Ed25519 private key."""
    return crypto()[0].generate()


def raw_public_key(private_key: Ed25519PrivateKey) -> bytes:
    """The raw 32 bytes of the private key's public half."""
    from cryptography.hazmat.primitives import serialization

    return private_key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def write_private_key(path: Path, private_key: Ed25519PrivateKey) -> None:
    """Write a new key file readable by its owner alone, in a folder made for its owner
    alone where there is none (as ``ssh-keygen`` does); never overwrite one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:  # a file where the folder should be, or no permission
        raise InvalidRequest(f"cannot write key file {path}: {exc.strerror or exc}") from None
    try:
        descriptor = os.open(path, flags, 0o600)
    except FileExistsError:
        raise InvalidRequest(f"{path} exists: a key file is never overwritten") from None
    except OSError as exc:
        raise InvalidRequest(f"cannot write key file {path}: {exc.strerror or exc}") from None
    from cryptography.hazmat.primitives import serialization

    # Unencrypted PKCS#8 PEM, as ``openssl genpkey -algorithm ed25519`` writes it.
    pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with os.fdopen(descriptor, "wb") as file:
        file.write(pem)


def read_private_key(path: Path) -> Ed25519PrivateKey:
    """An Ed25519 private key from a PEM file; :class:`InvalidRequest` naming what is wrong."""
    private_key_class, _ = crypto()
    from cryptography.hazmat.primitives import serialization

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read key file {path}: {exc.strerror or exc}") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(f"{path} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, private_key_class):
        raise InvalidRequest(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    return key

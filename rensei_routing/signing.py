"""Ed25519 keys and signatures over PyNaCl. Owns key files and key ids; must not decide what is
signed (core builds the bytes) and never prints, logs or reprs private key material.

Key files are one line of text: ``ed25519-private:<base64 32-byte seed>`` (mode 0600) and
``ed25519:<base64 32-byte public key>``. A key id is the first 8 bytes of SHA-256 of the raw
32-byte public key, as 16 lowercase hex digits.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import nacl.exceptions
import nacl.signing

from .errors import KeyFormatError, SignatureError, VerificationError

__all__ = [
    "MAX_KEY_FILE_BYTES",
    "MAX_SIGNED_BYTES",
    "KeyLookup",
    "PrivateKey",
    "PublicKey",
    "check",
    "generate",
    "key_id",
    "key_lookup",
    "load_private_key",
    "load_public_key",
    "save_private_key",
    "save_public_key",
    "verify",
]

#: Largest message this module signs or verifies (checked before any crypto runs).
MAX_SIGNED_BYTES: Final = 64 * 1024 * 1024
#: Largest key file or key text read.
MAX_KEY_FILE_BYTES: Final = 4096
_PUBLIC_PREFIX: Final = "ed25519:"
_PRIVATE_PREFIX: Final = "ed25519-private:"
_KEY_BYTES: Final = 32
_SIG_BYTES: Final = 64


def key_id(public_key: bytes) -> str:
    """First 8 bytes of SHA-256 of a raw 32-byte Ed25519 public key, as 16 lowercase hex digits."""
    return hashlib.sha256(public_key).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A raw 32-byte Ed25519 public key.

    Raises:
        KeyFormatError: ``raw`` is not 32 bytes or not a point on the curve.
    """

    raw: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.raw, bytes) or len(self.raw) != _KEY_BYTES:
            raise KeyFormatError("an Ed25519 public key is 32 bytes")
        try:
            nacl.signing.VerifyKey(self.raw)
        except (nacl.exceptions.CryptoError, ValueError, TypeError) as e:
            raise KeyFormatError(f"not an Ed25519 public key: {e}") from e

    @property
    def key_id(self) -> str:
        """See :func:`key_id`."""
        return key_id(self.raw)

    def to_text(self) -> str:
        """``ed25519:<base64>``."""
        return _PUBLIC_PREFIX + base64.b64encode(self.raw).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> PublicKey:
        """Parse :meth:`to_text` output (surrounding whitespace ignored).

        Raises:
            KeyFormatError: wrong prefix, not base64, or not 32 bytes.
        """
        return cls(_decode(text, _PUBLIC_PREFIX, "public key"))


@dataclass(frozen=True, slots=True)
class PrivateKey:
    """An Ed25519 signing key (its 32-byte seed). ``repr`` and ``str`` never show the seed.

    Raises:
        KeyFormatError: the seed is not 32 bytes.
    """

    seed: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.seed, bytes) or len(self.seed) != _KEY_BYTES:
            raise KeyFormatError("an Ed25519 private key seed is 32 bytes")

    @property
    def public_key(self) -> PublicKey:
        """The matching public key."""
        return PublicKey(bytes(nacl.signing.SigningKey(self.seed).verify_key))

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``.

        Raises:
            SignatureError: the message is larger than :data:`MAX_SIGNED_BYTES`.
        """
        if len(message) > MAX_SIGNED_BYTES:
            raise SignatureError(f"refusing to sign more than {MAX_SIGNED_BYTES} bytes")
        return nacl.signing.SigningKey(self.seed).sign(bytes(message)).signature

    def to_text(self) -> str:
        """``ed25519-private:<base64 seed>``: secret; write it only to a 0600 file."""
        return _PRIVATE_PREFIX + base64.b64encode(self.seed).decode("ascii")

    @classmethod
    def from_text(cls, text: str) -> PrivateKey:
        """Parse :meth:`to_text` output.

        Raises:
            KeyFormatError: wrong prefix, not base64, or not 32 bytes (the message never
                includes the text).
        """
        return cls(_decode(text, _PRIVATE_PREFIX, "private key"))


def generate() -> PrivateKey:
    """A new random Ed25519 key."""
    return PrivateKey(bytes(nacl.signing.SigningKey.generate()))


def check(public_key: PublicKey, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is a valid signature of ``message`` by ``public_key``; never raises."""
    if len(signature) != _SIG_BYTES or len(message) > MAX_SIGNED_BYTES:
        return False
    try:
        nacl.signing.VerifyKey(public_key.raw).verify(bytes(message), bytes(signature))
    except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError, ValueError, TypeError):
        return False
    return True


#: ``lookup(key_id)`` -> a signature check ``(message, signature) -> bool`` for a trusted key,
#: or ``None``: how pure verifiers (snapshots) ask for keys without touching crypto.
KeyLookup = Callable[[str], Callable[[bytes, bytes], bool] | None]


def key_lookup(keys: Iterable[PublicKey]) -> KeyLookup:
    """A :data:`KeyLookup` over exactly ``keys`` (by key id)."""
    by_id = {k.key_id: k for k in keys}

    def find(key_id: str) -> Callable[[bytes, bytes], bool] | None:
        key = by_id.get(key_id)
        if key is None:
            return None
        return lambda message, signature: check(key, message, signature)

    return find


def verify(public_key: PublicKey, message: bytes, signature: bytes) -> None:
    """Raise unless ``signature`` is a valid signature of ``message`` by ``public_key``.

    Raises:
        VerificationError: the signature is malformed, too large an input, or does not verify
            (chained from nacl's ``BadSignatureError`` when that is the cause).
    """
    if len(signature) != _SIG_BYTES:
        raise VerificationError(f"an Ed25519 signature is {_SIG_BYTES} bytes")
    if len(message) > MAX_SIGNED_BYTES:
        raise VerificationError(f"refusing to verify more than {MAX_SIGNED_BYTES} bytes")
    try:
        nacl.signing.VerifyKey(public_key.raw).verify(bytes(message), bytes(signature))
    except nacl.exceptions.BadSignatureError as e:
        raise VerificationError(f"signature does not verify under key {public_key.key_id}") from e
    except (nacl.exceptions.CryptoError, ValueError, TypeError) as e:
        raise VerificationError(f"signature could not be checked: {e}") from e


# -- files --------------------------------------------------------------------------------------


def load_private_key(path: Path) -> PrivateKey:
    """Read a private key file.

    Raises:
        KeyFormatError: the file is missing, unreadable, too large or malformed.
    """
    return PrivateKey.from_text(_read(path, "private key"))


def load_public_key(path: Path) -> PublicKey:
    """Read a public key file.

    Raises:
        KeyFormatError: the file is missing, unreadable, too large or malformed.
    """
    return PublicKey.from_text(_read(path, "public key"))


def save_private_key(key: PrivateKey, path: Path) -> bool:
    """Create ``path`` holding ``key``, mode 0600, atomically and never over an existing file.

    The key is written to a fresh temporary file (``O_EXCL``, 0600) beside ``path``, flushed to
    disk, then hard-linked into place, which fails if ``path`` already exists. Returns ``False``
    (and writes nothing) when ``path`` exists, e.g. another process won the race.

    Raises:
        SignatureError: the file could not be written.
    """
    return _create_exclusive(path, key.to_text() + "\n", 0o600)


def save_public_key(key: PublicKey, path: Path) -> None:
    """Write ``path`` holding ``key`` (mode 0644), replacing it atomically.

    Raises:
        SignatureError: the file could not be written.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write_new(tmp, key.to_text() + "\n", 0o644)
        os.replace(tmp, path)
    except OSError as e:
        _unlink_quietly(tmp)
        raise SignatureError(f"cannot write public key {path}: {e.strerror}") from e


def _create_exclusive(path: Path, text: str, mode: int) -> bool:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write_new(tmp, text, mode)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        _fsync_dir(path.parent)
        return True
    except OSError as e:
        raise SignatureError(f"cannot write key file {path}: {e.strerror}") from e
    finally:
        _unlink_quietly(tmp)


def _write_new(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _read(path: Path, what: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as e:
        raise KeyFormatError(f"cannot read {what} file {path}: {e.strerror}") from e
    if len(data) > MAX_KEY_FILE_BYTES:
        raise KeyFormatError(f"{what} file {path} is too large")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError as e:
        raise KeyFormatError(f"{what} file {path} is not ASCII text") from e


def _decode(text: str, prefix: str, what: str) -> bytes:
    if not isinstance(text, str) or len(text) > MAX_KEY_FILE_BYTES:
        raise KeyFormatError(f"{what} text is missing or too long")
    text = text.strip()
    if not text.startswith(prefix):
        raise KeyFormatError(f"{what} must start with {prefix!r}")
    try:
        raw = base64.b64decode(text[len(prefix) :].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as e:
        raise KeyFormatError(f"{what} is not base64") from e
    if len(raw) != _KEY_BYTES:
        raise KeyFormatError(f"{what} is {len(raw)} bytes, not {_KEY_BYTES}")
    return raw

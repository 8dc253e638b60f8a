"""Ed25519 keys and signatures over PyNaCl. Owns key files and key ids; must not decide what is
signed (core builds the bytes) and never prints, logs or reprs private key material.

Key files are one line of text: ``ed25519-private:<base64 32-byte seed>`` (mode 0600) and
``ed25519:<base64 32-byte public key>``. A key's derived id is the first 8 bytes of SHA-256 of
the raw 32-byte public key, as 16 lowercase hex digits; a key may also be trusted under an opaque
key id (1..128 of ``[A-Za-z0-9._:-]``, such as a platform's ``ksk_...``), and read from or
written as a JWKS entry (RFC 8037: ``kty=OKP, crv=Ed25519, x`` base64url without padding).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
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
    "check_raw",
    "generate",
    "jwk",
    "key_id",
    "key_lookup",
    "key_lookup_by_id",
    "load_private_key",
    "load_public_key",
    "read_jwks",
    "save_private_key",
    "save_public_key",
    "valid_key_id",
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


def check_raw(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """:func:`check` of a raw 32-byte public key (``False`` for one that is not a key): the
    ``Check`` callback the pure checkpoint and cosignature checks take."""
    try:
        key = PublicKey(public_key)
    except KeyFormatError:
        return False
    return check(key, message, signature)


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


def key_lookup_by_id(keys: Mapping[str, PublicKey]) -> KeyLookup:
    """A :data:`KeyLookup` over ``keys`` by the key ids they are trusted under (an opaque id,
    such as a platform's ``ksk_...``, or the derived one)."""
    by_id = dict(keys)

    def find(kid: str) -> Callable[[bytes, bytes], bool] | None:
        key = by_id.get(kid)
        if key is None:
            return None
        return lambda message, signature: check(key, message, signature)

    return find


# -- opaque key ids and JWKS (RFC 7517 / RFC 8037) -----------------------------------------------

_KID: Final = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: Largest JWKS document and number of entries read.
MAX_JWKS_BYTES: Final = 1024 * 1024
MAX_JWKS_KEYS: Final = 1000


def valid_key_id(kid: object) -> bool:
    """Whether ``kid`` is a key id: an opaque string of 1..128 of ``[A-Za-z0-9._:-]``."""
    return isinstance(kid, str) and _KID.fullmatch(kid) is not None


def _b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def jwk(kid: str, key: PublicKey) -> dict[str, str]:
    """The JWK of an Ed25519 public key (``kty=OKP, crv=Ed25519, x`` base64url unpadded)."""
    return {
        "kty": "OKP",
        "crv": "Ed25519",
        "kid": kid,
        "use": "sig",
        "alg": "EdDSA",
        "x": _b64url(key.raw),
    }


def read_jwks(document: object) -> tuple[list[tuple[str, PublicKey]], list[str]]:
    """The Ed25519 keys of a JWKS document ``{"keys": [...]}`` as ``(kid, key)`` pairs, and one
    line for every entry skipped (not an object, ``kty`` not ``OKP``, ``crv`` not ``Ed25519``,
    a missing or invalid ``kid``, ``x`` not unpadded base64url of 32 key bytes, a duplicate
    kid), as the daemon skips them.

    Raises:
        KeyFormatError: the document is not an object with a ``keys`` array.
    """
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise KeyFormatError('a JWKS document is an object with a "keys" array')
    entries = document["keys"]
    if len(entries) > MAX_JWKS_KEYS:
        raise KeyFormatError(f"a JWKS document holds at most {MAX_JWKS_KEYS} keys")
    found: list[tuple[str, PublicKey]] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        why = _jwk_problem(entry)
        if why is None:
            assert isinstance(entry, Mapping)
            kid, x = entry["kid"], entry["x"]
            try:
                key = PublicKey(base64.urlsafe_b64decode(x + "=" * (-len(x) % 4)))
            except (KeyFormatError, binascii.Error, ValueError):
                why = "x is not a 32-byte Ed25519 public key"
            else:
                if kid in seen:
                    why = f"duplicate kid {kid!r}"
                else:
                    seen.add(kid)
                    found.append((kid, key))
                    continue
        skipped.append(f"keys[{i}]: {why}")
    return found, skipped


def _jwk_problem(entry: object) -> str | None:
    if not isinstance(entry, Mapping):
        return "not an object"
    if entry.get("kty") != "OKP":
        return f"kty {entry.get('kty')!r} is not 'OKP'"
    if entry.get("crv") != "Ed25519":
        return f"crv {entry.get('crv')!r} is not 'Ed25519'"
    if not valid_key_id(entry.get("kid")):
        return "kid is missing or not 1..128 of [A-Za-z0-9._:-]"
    x = entry.get("x")
    if not isinstance(x, str) or "=" in x or not re.fullmatch(r"[A-Za-z0-9_-]{43}", x):
        return "x is not unpadded base64url of 32 bytes"
    return None


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

"""PyNaCl wrapper: keys, key ids, key files, sign/check/verify, size caps."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import nacl.exceptions
import pytest

from rensei_routing import signing
from rensei_routing.errors import KeyFormatError, SignatureError, VerificationError


def test_sign_check_verify_round_trip() -> None:
    key = signing.generate()
    pub = key.public_key
    sig = key.sign(b"message")
    assert len(sig) == 64
    assert signing.check(pub, b"message", sig)
    signing.verify(pub, b"message", sig)
    assert not signing.check(pub, b"messagE", sig)
    assert not signing.check(signing.generate().public_key, b"message", sig)


def test_verify_raises_chained_from_nacl() -> None:
    key = signing.generate()
    sig = bytearray(key.sign(b"m"))
    sig[0] ^= 1
    with pytest.raises(VerificationError) as info:
        signing.verify(key.public_key, b"m", bytes(sig))
    assert isinstance(info.value.__cause__, nacl.exceptions.BadSignatureError)
    with pytest.raises(VerificationError):
        signing.verify(key.public_key, b"m", b"short")
    assert not signing.check(key.public_key, b"m", b"short")


def test_size_caps_come_before_crypto(monkeypatch: pytest.MonkeyPatch) -> None:
    key = signing.generate()
    sig = key.sign(b"abcd")
    monkeypatch.setattr(signing, "MAX_SIGNED_BYTES", 3)
    with pytest.raises(SignatureError):
        key.sign(b"abcd")
    assert not signing.check(key.public_key, b"abcd", sig)
    with pytest.raises(VerificationError):
        signing.verify(key.public_key, b"abcd", sig)


def test_key_id_is_documented_prefix_of_sha256() -> None:
    pub = signing.generate().public_key
    assert pub.key_id == hashlib.sha256(pub.raw).hexdigest()[:16]
    assert signing.key_id(pub.raw) == pub.key_id


def test_private_key_never_shows_in_repr_or_str() -> None:
    key = signing.generate()
    text = key.to_text()
    secret = text.split(":", 1)[1]
    for shown in (repr(key), str(key), f"{key}"):
        assert secret not in shown and key.seed.hex() not in shown


def test_text_forms_round_trip() -> None:
    key = signing.generate()
    assert signing.PrivateKey.from_text(key.to_text()) == key
    assert signing.PublicKey.from_text(key.public_key.to_text() + "\n") == key.public_key
    assert key.public_key.to_text().startswith("ed25519:")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ed25519:",
        "ed25519:not-base64!",
        "ed25519:" + "QUJD",
        "rsa:" + "A" * 44,
        "ed25519-private:" + "A" * 44,
        "x" * 5000,
    ],
    ids=["empty", "no-body", "not-base64", "3-bytes", "wrong-prefix", "private-as-public", "huge"],
)
def test_malformed_public_keys(text: str) -> None:
    with pytest.raises(KeyFormatError):
        signing.PublicKey.from_text(text)


def test_malformed_private_key_message_never_echoes_the_text() -> None:
    bogus = "ed25519-private:" + "Zm9vYmFy" * 3
    with pytest.raises(KeyFormatError) as info:
        signing.PrivateKey.from_text(bogus)
    assert "Zm9vYmFy" not in str(info.value)
    with pytest.raises(KeyFormatError):
        signing.PrivateKey(b"\x00" * 31)
    with pytest.raises(KeyFormatError):
        signing.PublicKey(b"\x00" * 33)


def test_private_key_file_is_0600_and_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "host.key"
    first, second = signing.generate(), signing.generate()
    assert signing.save_private_key(first, path) is True
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert signing.save_private_key(second, path) is False
    assert signing.load_private_key(path) == first
    assert [p.name for p in tmp_path.iterdir()] == ["host.key"]  # no temporary left behind


def test_public_key_file_round_trip(tmp_path: Path) -> None:
    pub = signing.generate().public_key
    path = tmp_path / "host.pub"
    signing.save_public_key(pub, path)
    assert signing.load_public_key(path) == pub
    other = signing.generate().public_key
    signing.save_public_key(other, path)
    assert signing.load_public_key(path) == other


@pytest.mark.parametrize(
    "content",
    [b"", b"garbage\n", b"\xff\xfe", b"ed25519-private:" + b"A" * 5000],
    ids=["empty", "garbage", "binary", "huge"],
)
def test_bad_key_files(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "host.key"
    path.write_bytes(content)
    with pytest.raises(KeyFormatError):
        signing.load_private_key(path)


def test_missing_key_file(tmp_path: Path) -> None:
    with pytest.raises(KeyFormatError):
        signing.load_public_key(tmp_path / "absent.pub")
    with pytest.raises(SignatureError):
        signing.save_private_key(signing.generate(), tmp_path / "no" / "dir" / "host.key")

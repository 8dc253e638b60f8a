"""The home directory: init is idempotent and race-safe, keys stay private, bad states are typed."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rensei_routing import signing
from rensei_routing.errors import HomeError, MalformedError, SchemaVersionError
from rensei_routing.store.home import DEFAULT_ORG, Home


def test_init_lays_out_the_home(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    info = home.init()
    assert (info.org, info.created) == (DEFAULT_ORG, True)
    assert home.db_path == tmp_path / "h" / "rensei.db" and home.db_path.is_file()
    assert stat.S_IMODE(home.private_key_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.keys_dir.stat().st_mode) == 0o700
    assert home.public_key() == home.private_key().public_key
    assert home.public_key().key_id == info.key_id == home.info().key_id


def test_init_is_idempotent_and_keeps_key_and_org(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    first = home.init(org="acme")
    key_bytes = home.private_key_path.read_bytes()
    again = home.init()
    assert (again.org, again.key_id, again.created) == ("acme", first.key_id, False)
    assert home.init(org="acme").created is False
    assert home.private_key_path.read_bytes() == key_bytes
    with pytest.raises(HomeError, match="acme"):
        home.init(org="globex")


def test_deleted_public_key_file_is_restored(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    home.init()
    home.public_key_path.unlink()
    assert home.public_key() == home.private_key().public_key  # derived meanwhile
    home.init()
    assert signing.load_public_key(home.public_key_path) == home.private_key().public_key


def test_lost_or_swapped_private_key_is_refused(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    home.init()
    home.private_key_path.unlink()
    with pytest.raises(HomeError, match="missing"):
        home.init()
    signing.save_private_key(signing.generate(), home.private_key_path)
    with pytest.raises(HomeError, match="does not match"):
        home.init()


def test_uninitialised_home_says_to_run_init(tmp_path: Path) -> None:
    with pytest.raises(HomeError, match="rensei init"):
        Home(tmp_path / "nowhere").info()
    with pytest.raises(HomeError, match="rensei init"):
        Home(tmp_path / "nowhere").connect()
    assert not (tmp_path / "nowhere").exists()


def test_malformed_org_and_unusable_paths(tmp_path: Path) -> None:
    with pytest.raises(MalformedError):
        Home(tmp_path / "h").init(org="Acme Corp")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(HomeError):
        Home(blocker).init()
    foreign = Home(tmp_path / "f")
    foreign.path.mkdir()
    foreign.db_path.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(SchemaVersionError):
        foreign.init()


def test_private_key_message_never_shows_its_text(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    home.init()
    home.private_key_path.write_text("ed25519-private:c2VjcmV0c2VjcmV0\n")
    with pytest.raises(HomeError) as info:
        home.private_key()
    assert "c2VjcmV0" not in str(info.value)


_INIT = (
    "import sys; from pathlib import Path; from rensei_routing.store.home import Home; "
    "print(Home(Path(sys.argv[1])).init(org='acme').key_id)"
)


@pytest.mark.slow
def test_concurrent_inits_agree_on_one_key(tmp_path: Path) -> None:
    path = tmp_path / "h"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _INIT, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e.decode() for _, e in outs]
    ids = {o.decode().strip() for o, _ in outs}
    assert ids == {Home(path).info().key_id}
    assert sorted(q.name for q in (path / "keys").iterdir()) == ["host.key", "host.pub"]

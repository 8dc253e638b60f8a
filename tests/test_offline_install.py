"""The air-gapped install: a fresh virtual environment installs rensei-routing and the reference
seam plugin from a wheelhouse with ``--no-index`` (no pip configuration, proxies pointing
nowhere), and ``rensei quickstart`` runs there.

The wheelhouse is built beforehand by ``scripts/wheelhouse`` (that step needs an index once);
``.ci/run`` builds it and passes its path in ``RENSEI_WHEELHOUSE``. Without it this test is
skipped and says how to run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

WHEELHOUSE = os.environ.get("RENSEI_WHEELHOUSE")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not WHEELHOUSE,
        reason="set RENSEI_WHEELHOUSE to a wheelhouse (scripts/wheelhouse DIR; .ci/run does)",
    ),
]


def _offline_env(tmp_path: Path) -> dict[str, str]:
    """No pip configuration or index settings from this machine, and every proxy a dead port,
    so anything that tried the network would fail."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("PIP_", "RENSEI"))}
    dead = "http://127.0.0.1:9"
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        http_proxy=dead,
        https_proxy=dead,
        HTTP_PROXY=dead,
        HTTPS_PROXY=dead,
        no_proxy="",
        HOME=str(tmp_path / "user"),
    )
    return env


def test_install_from_the_wheelhouse_with_no_index_and_run_quickstart(tmp_path: Path) -> None:
    assert WHEELHOUSE is not None
    wheels = sorted(p.name for p in Path(WHEELHOUSE).glob("*.whl"))
    assert any(w.startswith("rensei_routing-") for w in wheels), wheels
    assert any(w.startswith("rensei_seams_hydraflow-") for w in wheels), wheels
    env = _offline_env(tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env)
    install = subprocess.run(
        [
            str(venv / "bin" / "pip"),
            "install",
            "--no-index",
            "--find-links",
            WHEELHOUSE,
            "rensei-routing",
            "rensei-seams-hydraflow",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [str(venv / "bin" / "rensei"), "quickstart"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Ruleset snapshot: quickstart@1" in done.stdout
    assert "3,000 sample spawns replayed" in done.stdout
    assert "Audit verify: intact: 3,000 records" in done.stdout
    # the installed package is the wheel's, not this checkout
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import rensei_routing; print(rensei_routing.__file__)",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=work,
        check=True,
    )
    assert str(venv) in where.stdout
    doctor = subprocess.run(
        [str(venv / "bin" / "rensei"), "--home", ".rensei-quickstart", "doctor"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert "hydraflow" in doctor.stdout

"""constraints-lowest.txt pins every range of setup.cfg to its lower bound, and .ci/run runs both
ends before the README's test command (scripts/test-dependency-ends; README, "Dependencies")."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bounds() -> dict[str, str]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    lines = parser["options"]["install_requires"].splitlines()
    for extra in parser["options.extras_require"].values():
        lines += extra.splitlines()
    bounds: dict[str, str] = {}
    for line in filter(None, (raw.strip() for raw in lines)):
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[a-z]+\])?>=([\w.]+)", line)
        assert found, f"setup.cfg: {line!r} is not NAME>=LOWEST"
        name = found.group(1).lower()
        assert bounds.get(name, found.group(3)) == found.group(3), f"{name}: two lower bounds"
        bounds[name] = found.group(3)
        if found.group(2) == "[binary]":
            bounds[f"{name}-binary"] = found.group(3)
    return bounds


def _pins() -> dict[str, str]:
    text = (ROOT / "constraints-lowest.txt").read_text(encoding="utf-8")
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==([\w.]+)$", text, flags=re.M)
    return {name.lower(): version for name, version in pins}


def _same(bound: str, pin: str) -> bool:
    """``3.51`` is ``3.51.0.0``: trailing zero components do not count."""
    return bound.split(".") == pin.split(".")[: len(bound.split("."))] and not any(
        int(p) for p in pin.split(".")[len(bound.split(".")) :]
    )


def test_every_lower_bound_is_pinned_in_the_lowest_constraints() -> None:
    bounds, pins = _bounds(), _pins()
    assert set(bounds) == set(pins)
    wrong = {n: (bounds[n], pins[n]) for n in bounds if not _same(bounds[n], pins[n])}
    assert wrong == {}


def test_the_comparison_of_a_bound_and_its_pin() -> None:
    assert _same("3.51", "3.51.0.0") and _same("8.2", "8.2.0") and _same("0.1.4", "0.1.4")
    assert not _same("8.2", "8.1.0") and not _same("3.51", "3.51.1.0")


def test_ci_runs_both_ends_before_the_readme_test_command() -> None:
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").rstrip("\n").splitlines()
    assert "scripts/test-dependency-ends" in lines
    assert lines.index("scripts/test-dependency-ends") < len(lines) - 1
    assert lines[-1].startswith("python3 -m venv .venv && ") and "pytest tests" in lines[-1]

"""Issue 19 #14: a snapshot validator plugin cannot change the signed, published snapshot.

Validators are shown a deep read-only copy of the sections: one that tries to change them
fails its validation (nothing is published, the validator is named), and one that goes around
the guard (``dict.__setitem__`` on its view) changes only its copy: the published snapshot's
content hash and section bytes are those of the same compile without the plugin. Real
components: the CLI in process with the plugin manager as its context object, real homes,
SQLite, Ed25519.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.core.snapshot.envelope import parse_snapshot
from rensei_routing.core.snapshot.readonly import ReadOnlyDict, ReadOnlyList, read_only
from rensei_routing.core.snapshot.validators import SnapshotValidator, run_validators
from rensei_routing.plugins.hookspecs import hookimpl
from rensei_routing.plugins.manager import RenseiPluginManager, get_plugin_manager, register_plugin

EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
WIDENED = {"profile": "gpu-heavy", "project": "intruder"}


def _append_grant(sections: Mapping[str, Any]) -> list[str]:
    sections["capacityProfiles"]["grants"].append(WIDENED)
    return []


def _replace_inventory(sections: Mapping[str, Any]) -> list[str]:
    sections["poolHostInventory"]["pools"][0]["status"] = "active"  # type: ignore[index]
    return []


def _around_the_guard(sections: Mapping[str, Any]) -> list[str]:
    grants = sections["capacityProfiles"]["grants"]
    list.append(grants, WIDENED)  # the bypass: the view's own list, not the published one
    dict.__setitem__(sections["capacityProfiles"], "profiles", [])  # type: ignore[index]
    dict.__setitem__(sections, "posteriorSummary", {"arms": []})  # type: ignore[index]
    return []


class Mutator:
    """A plugin whose one validator runs ``check``."""

    def __init__(self, check: Callable[[Mapping[str, Any]], list[str]]) -> None:
        self.check = check

    @hookimpl
    def register_snapshot_validators(self, register: Any) -> None:
        register(SnapshotValidator(name="mutator", check=self.check))


def _run(pm: RenseiPluginManager, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), obj=pm, catch_exceptions=False)


def _control(tmp_path: Path, name: str, pm: RenseiPluginManager) -> Path:
    home = tmp_path / name
    for args in (
        ("init", "--home", str(home), "--org", "org_a"),
        ("org", "load", str(EXAMPLES / "org.json"), "--home", str(home)),
        ("policy", "save", str(EXAMPLES / "policies.json"), "--home", str(home)),
    ):
        result = _run(pm, *args)
        assert result.exit_code == 0, result.output
    return home


def _pm(plugin: object | None) -> RenseiPluginManager:
    pm = get_plugin_manager(load_entrypoints=False)
    if plugin is not None:
        register_plugin(pm, plugin, "mutator-plugin")
    return pm


def _published(pm: RenseiPluginManager, home: Path, target: Path) -> dict[str, Any]:
    compiled = _run(pm, "snapshot", "compile", "--json", "--home", str(home))
    assert compiled.exit_code == 0, compiled.output
    exported = _run(pm, "snapshot", "export", str(target), "--home", str(home))
    assert exported.exit_code == 0, exported.output
    return parse_snapshot(target.read_bytes())


@pytest.mark.parametrize("check", [_append_grant, _replace_inventory], ids=["append", "assign"])
def test_a_validator_that_mutates_the_sections_fails_and_nothing_is_published(
    tmp_path: Path, check: Callable[[Mapping[str, Any]], list[str]]
) -> None:
    pm = _pm(Mutator(check))
    home = _control(tmp_path, "control", pm)
    refused = _run(pm, "snapshot", "compile", "--home", str(home))
    assert refused.exit_code == 1, refused.output
    assert "mutator" in refused.stderr and "read-only" in refused.stderr
    history = _run(pm, "snapshot", "history", "--json", "--home", str(home))
    assert json.loads(history.stdout) == []  # nothing was published


def test_a_validator_going_around_the_guard_fails_and_changes_nothing(tmp_path: Path) -> None:
    plain = _published(_pm(None), _control(tmp_path, "plain", _pm(None)), tmp_path / "a.json")
    pm = _pm(Mutator(_around_the_guard))
    home = _control(tmp_path, "hostile", pm)
    refused = _run(pm, "snapshot", "compile", "--home", str(home))
    assert refused.exit_code == 1, refused.output
    assert "mutator" in refused.stderr and "ChangedSections" in refused.stderr
    history = _run(pm, "snapshot", "history", "--json", "--home", str(home))
    assert json.loads(history.stdout) == []
    # without the plugin the same data publishes the same content as any other home's
    again = _published(_pm(None), home, tmp_path / "b.json")
    assert again["contentHash"] == plain["contentHash"]
    assert again["sections"] == plain["sections"]
    assert WIDENED not in again["sections"]["capacityProfiles"]["grants"]


def test_the_read_only_view_reads_like_json_and_refuses_every_change() -> None:
    sections = {"a": {"b": [1, {"c": "d"}]}, "t": (1, 2)}
    view = read_only(sections)
    assert view == {"a": {"b": [1, {"c": "d"}]}, "t": [1, 2]}
    assert isinstance(view, dict) and isinstance(view["a"]["b"], list)
    assert json.dumps(view) == '{"a": {"b": [1, {"c": "d"}]}, "t": [1, 2]}'
    changes: list[Callable[[], object]] = [
        lambda: view.__setitem__("x", 1),
        lambda: view.pop("a"),
        lambda: view.update(x=1),
        lambda: view["a"].setdefault("x", 1),
        lambda: view["a"]["b"].append(3),
        lambda: view["a"]["b"].sort(),
        lambda: view["a"]["b"][1].clear(),
        lambda: view["a"]["b"].__delitem__(0),
    ]
    for change in changes:
        with pytest.raises(TypeError, match="read-only"):
            change()
    assert sections == {"a": {"b": [1, {"c": "d"}]}, "t": (1, 2)}
    own = view.copy()
    own["x"] = 1  # a copy is the validator's own to change
    assert type(own) is dict and "x" not in view
    assert not isinstance(view["a"]["b"][1].copy(), ReadOnlyDict)
    assert not isinstance(list(view["a"]["b"]), ReadOnlyList)


def test_run_validators_shows_every_validator_the_sections_as_they_are() -> None:
    sections: dict[str, Any] = {
        "capacityProfiles": {"grants": [], "profiles": [{"id": "p"}]},
        "posteriorSummary": {"arms": [1]},
    }
    original = json.loads(json.dumps(sections))
    seen: list[object] = []

    def look(s: Mapping[str, Any]) -> list[str]:
        seen.append(json.loads(json.dumps(s)))
        return []

    results = run_validators(
        [
            SnapshotValidator(name="m", check=_append_grant, plugin="p"),
            SnapshotValidator(name="look-1", check=look, plugin="p"),
            SnapshotValidator(name="around", check=_around_the_guard, plugin="p"),
            SnapshotValidator(name="look-2", check=look, plugin="p"),
        ],
        sections,
    )
    assert [r.ok for r in results] == [False, True, False, True]
    assert results[0].error is not None and results[0].error.startswith("TypeError")
    assert results[2].error is not None and results[2].error.startswith("ChangedSections")
    assert sections == original
    assert seen == [original, original]  # the next validator sees the sections as they are

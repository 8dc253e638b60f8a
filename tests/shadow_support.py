"""Shared helpers for the shadow tests: the test seams registered through a real entry point,
a home with policies saved, and spawn documents."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.plugins.manager import SeamRegistry, get_plugin_manager, seam_registry
from rensei_routing.store.home import Home
from rensei_routing.store.policies import PolicyStore

from .plugins import hydraflow_seams

ENTRY_POINT = "test-hydraflow-seams"

ACCOUNTS = [
    {"account_id": "anthropic-primary", "provider_binding": "anthropic"},
    {"account_id": "zai-main", "provider_binding": "zai-harness"},
]


def registry() -> SeamRegistry:
    """The built-in seam plus the four test seams, through a plugin manager."""
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(hydraflow_seams, name="tests.plugins.hydraflow_seams")
    try:
        return seam_registry(pm)
    finally:
        pm.unregister(name="tests.plugins.hydraflow_seams")


@pytest.fixture
def installed_seams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test seams installed as an entry point (a dist-info on sys.path) and selected with
    RENSEI_ROUTING_LOAD_PLUGINS, exactly as an installed plugin is found by the CLI."""
    site = tmp_path / "site"
    dist = site / "rensei_test_hydraflow_seams-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rensei-test-hydraflow-seams\nVersion: 0.0.0\n"
    )
    (dist / "entry_points.txt").write_text(
        f"[rensei_routing]\n{ENTRY_POINT} = tests.plugins.hydraflow_seams\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("RENSEI_ROUTING_LOAD_PLUGINS", ENTRY_POINT)
    yield


def spawn(**fields: Any) -> dict[str, Any]:
    """A spawn document: an implementer on acme/widgets at the agentic seam, on Anthropic."""
    doc: dict[str, Any] = {
        "seam": "agentic-runner",
        "principal_id": "implementer",
        "repo": "acme/widgets",
        "repo_class": "client",
        "accounts": ACCOUNTS,
        "stages": [{"mechanism": "default", "provider": "claude"}],
        "model": "claude-sonnet-4-5",
        "account_id": "anthropic-primary",
    }
    doc.update(fields)
    return {k: v for k, v in doc.items() if v is not None}


def write_lines(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return path


POLICIES: dict[str, Any] = {
    "policies": [
        {
            "id": "client-on-anthropic",
            "priority": 10,
            "match": {"repo_classes": ["client"]},
            "action": {"provider_lock": "anthropic"},
        },
        {
            "id": "reviewers-on-zai",
            "priority": 10,
            "match": {"repo_classes": ["hydraflow"], "roles": ["reviewer"]},
            "action": {
                "provider_lock": "zai-harness",
                "requirement_map": [{"requirement": "balanced", "model": "glm-4.6"}],
            },
        },
    ]
}


def home_with_policies(tmp_path: Path, policies: dict[str, Any] | None = None) -> Home:
    home = Home(tmp_path / "home")
    home.init()
    snapshot = PolicySnapshot.from_dict(POLICIES if policies is None else policies)
    conn = home.connect(write=True)
    try:
        PolicyStore(conn).save(snapshot.policies, saved_at="2026-01-01T00:00:00.000000Z")
    finally:
        conn.close()
    return home

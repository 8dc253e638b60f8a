"""One import for plugin authors: ``rensei_routing.plugin`` exports ``hookimpl`` and every type a
hook takes or registers (found by resolving the hook specifications' annotations, and the types
those types hold), the shipped and sample plugins import nothing else of the package, the module
stays lazy, and docs/plugins.md imports only from it."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import rensei_routing
from rensei_routing import plugin
from rensei_routing.core.routing.decision import RouteDecision
from rensei_routing.core.routing.explanation import Explanation
from rensei_routing.plugins import hookspecs
from rensei_routing.plugins.info import HOOK_NAMES

ROOT = Path(__file__).resolve().parent.parent
PLUGIN_MODULE = "rensei_routing.plugin"
DOCS = ROOT / "docs" / "plugins.md"


# -- every type a hook names is exported ----------------------------------------------------------


def _type_checking_namespace(module: ModuleType) -> dict[str, Any]:
    """``module``'s globals plus what its ``if TYPE_CHECKING:`` blocks import (run here), so the
    string annotations of its functions resolve to the real objects."""
    tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
    namespace: dict[str, Any] = dict(vars(module))
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            code = compile(
                ast.Module(body=node.body, type_ignores=[]), str(module.__file__), "exec"
            )
            exec(code, namespace)  # imports only
    return namespace


SPEC_NAMESPACE = _type_checking_namespace(hookspecs)


def _package_types(annotation: object) -> set[type]:
    """Every class of the package reached from ``annotation``: through generic arguments
    (``Callable[[Seam], None]``, ``tuple[LiteralFamily, ...]``) and the public fields of every
    class reached (``Authorizer.prepare`` -> ``AuthorizationRequest`` -> ``EntityRef``)."""
    found: set[type] = set()
    stack: list[object] = [annotation]
    visited: list[object] = []
    while stack:
        current = stack.pop()
        if any(current is v for v in visited):
            continue
        visited.append(current)
        if isinstance(current, list | tuple):
            stack.extend(current)
            continue
        stack.extend(typing.get_args(current))
        if isinstance(current, type) and current.__module__.startswith("rensei_routing"):
            found.add(current)
            hints = typing.get_type_hints(current)
            stack.extend(hint for field, hint in hints.items() if not field.startswith("_"))
    return found


def _hook_types(function: Callable[..., Any], namespace: dict[str, Any]) -> set[type]:
    hints = typing.get_type_hints(function, globalns=namespace)
    return set().union(*(_package_types(hint) for hint in hints.values()))


def _not_exported(types: set[type]) -> list[str]:
    return sorted(
        f"{t.__module__}.{t.__qualname__}"
        for t in types
        if t.__name__ not in plugin.__all__ or getattr(plugin, t.__name__, None) is not t
    )


@pytest.mark.parametrize("hook", HOOK_NAMES)
def test_every_type_a_hook_takes_or_registers_is_exported_from_the_plugin_module(
    hook: str,
) -> None:
    assert _not_exported(_hook_types(getattr(hookspecs, hook), SPEC_NAMESPACE)) == []


def test_the_walk_reaches_the_types_held_inside_a_hooks_types() -> None:
    reached = set().union(*(_hook_types(getattr(hookspecs, h), SPEC_NAMESPACE) for h in HOOK_NAMES))
    names = {t.__name__ for t in reached}
    assert names >= {
        "Seam",
        "Stage",  # Seam.classifier: Callable[[Sequence[Stage]], Stage]
        "VocabularyExtension",
        "LiteralFamily",
        "Provenance",  # LiteralFamily.provenance
        "RedactionPattern",
        "SnapshotValidator",
        "Authorizer",
        "AuthorizationRequest",  # Authorizer.prepare -> Decide
        "PolicyVerdict",
        "EntityRef",  # AuthorizationRequest.principal
        "AuditRecord",
        "EnforcedRoute",
    }


def test_a_hook_naming_a_type_the_plugin_module_lacks_is_caught() -> None:
    def observe_decision(
        decision: RouteDecision, explain: Callable[[Explanation], None]
    ) -> RouteDecision:
        raise AssertionError

    namespace = {"RouteDecision": RouteDecision, "Explanation": Explanation, "Callable": Callable}
    missing = _not_exported(_hook_types(observe_decision, namespace))
    assert "rensei_routing.core.routing.decision.RouteDecision" in missing
    assert "rensei_routing.core.routing.explanation.Explanation" in missing


def test_every_class_a_hook_specification_names_is_named_at_the_plugin_module() -> None:
    source = Path(str(hookspecs.__file__)).read_text(encoding="utf-8")
    named = re.findall(r":class:`~?([\w.]+)`", source)
    assert len(named) >= 8
    for target in named:
        module, _, name = target.rpartition(".")
        assert module == PLUGIN_MODULE, target
        assert name in plugin.__all__, target


# -- the module itself --------------------------------------------------------------------------


def test_each_export_is_the_object_of_its_defining_module() -> None:
    lazy = plugin._LAZY  # type: ignore[attr-defined]
    assert sorted(lazy) == sorted(plugin.__all__)
    for name in plugin.__all__:
        defining = importlib.import_module(lazy[name], "rensei_routing")
        assert getattr(plugin, name) is getattr(defining, name), name
    assert set(plugin.__all__) <= set(dir(plugin))
    assert plugin.hookimpl is rensei_routing.hookimpl  # the older spelling still works


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="'Sema'"):
        plugin.Sema  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(ImportError):
        exec("from rensei_routing.plugin import get_plugin_manager", {})


_LOADED = """
import json, sys
def loaded():
    return sorted(m for m in sys.modules if m.startswith(("rensei_routing", "pluggy", "pytest")))
import rensei_routing.plugin
steps = {"import": loaded()}
from rensei_routing.plugin import Authorizer, EnforcedRoute, Seam, SnapshotValidator
from rensei_routing.plugin import VocabularyExtension
steps["types"] = loaded()
from rensei_routing.plugin import hookimpl
steps["hookimpl"] = loaded()
print(json.dumps(steps))
"""


def test_the_plugin_module_imports_each_name_on_first_use() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED], capture_output=True, text=True, check=True, timeout=60
    )
    steps = json.loads(done.stdout)
    assert steps["import"] == ["rensei_routing", "rensei_routing._moved", "rensei_routing.plugin"]
    assert "rensei_routing.core.shadow.compare" in steps["types"]
    for step in ("types", "hookimpl"):  # no manager, no test helpers, until asked for
        assert not {"rensei_routing.plugins.manager", "pytest"} & set(steps[step]), step
    assert "pluggy" not in steps["types"]
    assert {"pluggy", "rensei_routing.plugins.hookspecs"} <= set(steps["hookimpl"])


# -- plugins import only from it ------------------------------------------------------------------


def _outside_imports(source: str, package: str) -> Iterator[tuple[int, str]]:
    """Every import of the package in ``source`` (a module of ``package``) that is not
    ``rensei_routing.plugin``: at module level, in functions, under ``TYPE_CHECKING`` (a type
    checker imports it too), relative, and ``importlib.import_module`` of a literal name."""
    for node in ast.walk(ast.parse(source)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if base == "rensei_routing":
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                targets = [base]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                targets = [first.value]
        for target in targets:
            if target.split(".")[0] == "rensei_routing" and target != PLUGIN_MODULE:
                yield node.lineno, target


def _plugin_sources() -> dict[Path, str]:
    """Each shipped plugin's package, the built-in plugins and the tests' sample plugins: file
    -> the package it belongs to."""
    found: dict[Path, str] = {}
    for init in sorted((ROOT / "plugins").glob("*/*/__init__.py")):
        if init.parent.name in ("tests", "benchmarks", "samples"):
            continue
        for path in sorted(init.parent.rglob("*.py")):
            found[path] = init.parent.name
    for path in sorted((ROOT / "rensei_routing" / "plugins" / "default").glob("*.py")):
        found[path] = "rensei_routing.plugins.default"
    for path in sorted((ROOT / "tests" / "plugins").glob("*.py")):
        found[path] = "tests.plugins"
    return found


def test_the_shipped_built_in_and_sample_plugins_import_only_the_plugin_module() -> None:
    sources = _plugin_sources()
    dists = {
        p.relative_to(ROOT).parts[1] for p in sources if p.relative_to(ROOT).parts[0] == "plugins"
    }
    assert dists == {"rensei-seams-hydraflow", "rensei-authz-cedar"}
    problems, users = [], 0
    for path, package in sources.items():
        source = path.read_text(encoding="utf-8")
        problems += [
            f"{path.relative_to(ROOT)}:{line}: imports {target}"
            for line, target in _outside_imports(source, package)
        ]
        users += "rensei_routing.plugin import" in source or "...plugin import" in source
    assert problems == []
    assert users >= 8  # the scan looked at real plugins


_PLANTED = """
import importlib
from typing import TYPE_CHECKING
from rensei_routing.plugin import Seam, hookimpl
from ...plugin import Stage
from rensei_routing import plugin
from rensei_routing import hookimpl as old_marker
import rensei_routing.errors
if TYPE_CHECKING:
    from rensei_routing.core.snapshot.authz import Decide
def register_seams(register):
    from ...core.shadow.compare import classify_legacy_mechanism
    importlib.import_module("rensei_routing.plugins.manager")
"""


def test_the_scan_finds_every_other_import() -> None:
    found = sorted(t for _, t in _outside_imports(_PLANTED, "rensei_routing.plugins.default"))
    assert found == [
        "rensei_routing.core.shadow.compare",
        "rensei_routing.core.snapshot.authz",
        "rensei_routing.errors",
        "rensei_routing.hookimpl",
        "rensei_routing.plugins.manager",
    ]


# -- the docs -----------------------------------------------------------------------------------


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)


def test_docs_examples_import_only_the_plugin_module_and_only_its_names() -> None:
    blocks = _python_blocks()
    assert len(blocks) >= 4
    for block in blocks:
        assert list(_outside_imports(block, "docs")) == [], block
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module == PLUGIN_MODULE:
                assert {a.name for a in node.names} <= set(plugin.__all__), block


def test_docs_name_types_by_the_plugin_module_only() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert re.findall(r"rensei_routing\.(?:core|errors)\b[\w.]*", text) == []
    assert "from rensei_routing import" not in text
    assert "from rensei_routing.plugin import" in text


def test_the_docs_worked_example_is_a_working_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (example,) = [b for b in _python_blocks() if b.startswith("# acme_seams.py")]
    (tmp_path / "acme_seams.py").write_text(example, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    acme = importlib.import_module("acme_seams")
    try:
        pm = plugin.plugin_manager_for(acme, "acme")
        plugin.assert_plugin_ok(pm, "acme")
        plugin.assert_classifier_total(acme.SEAM, count=200)
        from rensei_routing.plugins.manager import seam_registry, vocabulary

        assert seam_registry(pm).get("acme-batch") is acme.SEAM
        assert "batch-window" in vocabulary(pm).legacy_mechanisms
    finally:
        sys.modules.pop("acme_seams", None)

"""The layout's rules (docs/architecture.md), checked on the source so they stay true: the core is
pure and self-contained, its domains form a DAG with routing at the bottom, the store imports only
the core and the leaf modules, the sides and services never import the CLI nor each other's side,
no import cycle, no module over 600 lines, every package opens with a docstring saying what it
owns, and docs/architecture.md names exactly the packages of the tree."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rensei_routing._moved import MOVED

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rensei_routing"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 600

#: Leaf modules: import nothing of the package but ``errors``; every layer may use them.
LEAVES = frozenset({"rensei_routing.errors", "rensei_routing.signing", "rensei_routing.files"})
#: The core's shared pieces (no domain may be imported by them).
SHARED = frozenset(
    {
        "rensei_routing.core.canonical",
        "rensei_routing.core._parse",
        "rensei_routing.core.redact",
        "rensei_routing.core.timestamps",
    }
)
#: A core domain -> the domains it may import (besides itself and the shared pieces).
DOMAINS: dict[str, frozenset[str]] = {
    "routing": frozenset(),
    "audit": frozenset({"routing"}),
    "snapshot": frozenset({"routing", "audit"}),
    "shadow": frozenset({"routing", "audit"}),
    "enforce": frozenset({"routing", "audit", "shadow"}),
}
#: Sides and services: never the CLI; the two sides never each other.
SERVICES = ("control", "host", "shadow", "ops", "plugins", "fleet", "console", "enforce")
SIDES = {"control": "host", "host": "control"}
#: The pytest plugin for plugin authors runs ``rensei`` commands: it sits above the CLI.
DRIVES_THE_CLI = frozenset({"rensei_routing.plugins.testing"})


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    return {_module_name(p, package.parent): p for p in sorted(package.rglob("*.py"))}


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of every node that runs only for a type checker: the bodies of
    ``if TYPE_CHECKING:`` (their ``else:`` runs, and is kept)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for stmt in node.body:
                skipped.update(id(n) for n in ast.walk(stmt))
    return skipped


def _in_functions(tree: ast.Module) -> set[int]:
    """The ids of every node inside a function or lambda (it runs when called, not at import)."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for child in ast.iter_child_nodes(node):
                inside.update(id(n) for n in ast.walk(child))
    return inside


def _literal_import(node: ast.Call) -> str | None:
    """``importlib.import_module("rensei_routing.x")`` / ``import_module(...)`` /
    ``__import__(...)`` with a literal module name: the module it imports."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if called not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _imports(
    name: str, *, top_level_only: bool = False, modules: dict[str, Path] = MODULES
) -> Iterator[tuple[str, int]]:
    """Every module of the package that ``name`` imports (resolved; a name imported from a
    package that is a module of its own counts as that module), with its line: at module level
    and inside functions, classes, ``try``/``except``, ``with``, ``match`` and every other
    block, and ``importlib.import_module`` of a literal name. Imports under ``if
    TYPE_CHECKING:`` are skipped (they never run); ``top_level_only`` keeps only what runs at
    import time (nothing inside a function)."""
    path = modules[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    yield from _imports_in(
        path.read_text(encoding="utf-8"), package, top_level_only=top_level_only, modules=modules
    )


def _imports_in(
    source: str,
    package: str,
    *,
    top_level_only: bool = False,
    modules: dict[str, Path] = MODULES,
) -> Iterator[tuple[str, int]]:
    """:func:`_imports` of the module ``source`` in ``package``."""
    tree = ast.parse(source)
    skipped = _type_checking_only(tree)
    if top_level_only:
        skipped |= _in_functions(tree)

    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("rensei_routing"):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("rensei_routing"):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if sub in modules else target), node.lineno
        elif isinstance(node, ast.Call):
            literal = _literal_import(node)
            if literal and literal.startswith("rensei_routing"):
                yield literal, node.lineno


_EVERYWHERE = """
from typing import TYPE_CHECKING
import importlib
from rensei_routing import errors
if TYPE_CHECKING:
    from rensei_routing.store import db
else:
    from rensei_routing.core import canonical
try:
    pass
except ImportError:
    from rensei_routing.core import redact
class C:
    from rensei_routing import signing
def f(x):
    from rensei_routing.host import cache
    with open(x):
        import rensei_routing.control.server
    match x:
        case 1:
            from rensei_routing.cli import _root
    try:
        pass
    except OSError:
        from rensei_routing.ops import doctor
    importlib.import_module("rensei_routing.console.app")
"""


def test_the_import_walk_sees_every_place_an_import_runs() -> None:
    """Inside functions, ``except`` handlers, ``match`` cases, ``with`` blocks, class bodies,
    the ``else:`` of ``if TYPE_CHECKING``, and ``importlib.import_module`` of a literal name;
    never the body of ``if TYPE_CHECKING:``. (The walk this replaced dropped ``except``
    handlers, ``match`` cases, that ``else:`` and ``import_module``.)"""
    seen = {t for t, _ in _imports_in(_EVERYWHERE, "rensei_routing.x")}
    at_import = {t for t, _ in _imports_in(_EVERYWHERE, "rensei_routing.x", top_level_only=True)}
    run_at_import = {
        "rensei_routing.errors",
        "rensei_routing.core.canonical",
        "rensei_routing.core.redact",
        "rensei_routing.signing",
    }
    in_f = {
        "rensei_routing.host.cache",
        "rensei_routing.control.server",
        "rensei_routing.cli._root",
        "rensei_routing.ops.doctor",
        "rensei_routing.console.app",
    }
    assert seen == run_at_import | in_f
    assert at_import == run_at_import
    assert "rensei_routing.store.db" not in seen


def _edges(
    *, top_level_only: bool = False, modules: dict[str, Path] = MODULES
) -> dict[str, set[str]]:
    return {
        m: {t for t, _ in _imports(m, top_level_only=top_level_only, modules=modules) if t != m}
        for m in modules
    }


def _domain(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "core" and parts[2] in DOMAINS:
        return parts[2]
    return None


def _violations(check: str) -> list[str]:
    found = []
    for module in MODULES:
        for target, line in _imports(module):
            problem = RULES[check](module, target)
            if problem:
                found.append(f"{MODULES[module].relative_to(ROOT)}:{line}: {problem}")
    return found


def _core_pure(module: str, target: str) -> str | None:
    if module.startswith("rensei_routing.core") and not (
        target.startswith("rensei_routing.core") or target == "rensei_routing.errors"
    ):
        return f"the core imports {target}"
    return None


def _domains(module: str, target: str) -> str | None:
    if module in SHARED and _domain(target):
        return f"a shared core piece imports the {_domain(target)} domain"
    mine, theirs = _domain(module), _domain(target)
    if mine and theirs and mine != theirs and theirs not in DOMAINS[mine]:
        return f"core.{mine} imports core.{theirs}"
    return None


def _store(module: str, target: str) -> str | None:
    if module.startswith("rensei_routing.store") and not (
        target.startswith(("rensei_routing.core", "rensei_routing.store")) or target in LEAVES
    ):
        return f"the store imports {target}"
    return None


def _leaves(module: str, target: str) -> str | None:
    if module in LEAVES and target != "rensei_routing.errors":
        return f"a leaf module imports {target}"
    return None


def _sides(module: str, target: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[1] not in SERVICES or module in DRIVES_THE_CLI:
        return None
    if target.startswith("rensei_routing.cli"):
        return f"rensei_routing.{parts[1]} imports the CLI ({target})"
    other = SIDES.get(parts[1])
    if other and target.startswith(f"rensei_routing.{other}"):
        return f"the {parts[1]} side imports the {other} side ({target})"
    return None


def _fleet(module: str, target: str) -> str | None:
    """The fleet service imports the core, the store and the leaves (and itself) only."""
    if module.startswith("rensei_routing.fleet") and not (
        target.startswith(("rensei_routing.core", "rensei_routing.store", "rensei_routing.fleet"))
        or target in LEAVES
    ):
        return f"the fleet service imports {target}"
    return None


def _old_paths(module: str, target: str) -> str | None:
    if target in MOVED:
        return f"imports the old path {target} (use {MOVED[target]})"
    return None


#: Command modules import no other command module; the one exception attaches a subcommand.
ATTACHES = frozenset(
    {
        ("rensei_routing.cli.whatif", "rensei_routing.cli.policy"),
        ("rensei_routing.cli.sessions", "rensei_routing.cli.host"),
        ("rensei_routing.cli.replay", "rensei_routing.cli.audit"),
        ("rensei_routing.cli.audit_import", "rensei_routing.cli.audit"),
        ("rensei_routing.cli.audit_segments", "rensei_routing.cli.audit"),
        ("rensei_routing.cli.audit_proofs", "rensei_routing.cli.audit"),
        ("rensei_routing.cli.policy_import", "rensei_routing.cli.policy"),
    }
)


def _commands(module: str, target: str) -> str | None:
    def is_command(name: str) -> bool:
        parts = name.split(".")
        return len(parts) == 3 and parts[1] == "cli" and not parts[2].startswith("_")

    if is_command(module) and is_command(target) and (module, target) not in ATTACHES:
        return f"command module {module} imports command module {target}"
    return None


def _is_command(name: str) -> bool:
    parts = name.split(".")
    return len(parts) == 3 and parts[1] == "cli" and not parts[2].startswith("_")


def _private_names_in(source: str, module: str, modules: dict[str, Path]) -> list[str]:
    """``module:line: name`` for every private name (``_x``) that ``module`` (a module of the
    CLI, given as its ``source``) imports from a command module other than itself, anywhere in
    the file (inside functions too; ``if TYPE_CHECKING:`` included: a private name is not
    another module's to name, even for a type checker)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            package = module.split(".")[: -node.level]
            target = ".".join(package + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            source_module = sub if sub in modules else target
            if (
                alias.name.startswith("_")
                and _is_command(source_module)
                and source_module != module
            ):
                found.append(f"{module}:{node.lineno}: {alias.name} from {source_module}")
    return found


def test_no_command_module_imports_another_commands_private_names() -> None:
    """A private helper two commands share lives in a ``cli/_*.py`` module, never in one of the
    command modules (``cli/x.py`` importing ``_foo`` from ``cli/y.py``)."""
    found = [
        problem
        for module, path in MODULES.items()
        if module.startswith("rensei_routing.cli.")
        for problem in _private_names_in(path.read_text(encoding="utf-8"), module, MODULES)
    ]
    assert found == []


def test_the_private_name_check_finds_one() -> None:
    cli = {f"rensei_routing.cli.{n}": Path(f"{n}.py") for n in ("audit", "replay", "_output")}
    planted = (
        "from ._output import emit\n"
        "from .audit import audit, _SEQ\n"
        "def f():\n"
        "    from rensei_routing.cli.audit import _progress\n"
    )
    assert _private_names_in(planted, "rensei_routing.cli.replay", cli) == [
        "rensei_routing.cli.replay:2: _SEQ from rensei_routing.cli.audit",
        "rensei_routing.cli.replay:4: _progress from rensei_routing.cli.audit",
    ]
    own = "from ._output import _escape\nfrom .replay import _x\n"
    assert _private_names_in(own, "rensei_routing.cli.replay", cli) == []


RULES = {
    "commands-import-no-command": _commands,
    "core-pure": _core_pure,
    "core-domains": _domains,
    "store-only-core": _store,
    "leaves": _leaves,
    "sides-never-import-cli": _sides,
    "no-old-paths": _old_paths,
    "fleet-only-core-store-leaves": _fleet,
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_layering_rule_holds(rule: str) -> None:
    assert _violations(rule) == []


def test_the_rules_catch_what_they_forbid() -> None:
    assert _core_pure("rensei_routing.core.routing.resolver", "rensei_routing.store.db")
    assert _domains("rensei_routing.core.routing.jsonl", "rensei_routing.core.snapshot.freshness")
    assert _domains("rensei_routing.core.redact", "rensei_routing.core.routing.context")
    assert not _domains("rensei_routing.core.snapshot.org", "rensei_routing.core.routing.policy")
    assert _store("rensei_routing.store.audit", "rensei_routing.plugins.manager")
    assert _sides("rensei_routing.host.poll", "rensei_routing.cli._clock")
    assert _sides("rensei_routing.host.claims", "rensei_routing.control.snapshots")
    assert not _sides("rensei_routing.ops.doctor", "rensei_routing.host.status")
    assert _fleet("rensei_routing.fleet.ingest", "rensei_routing.host.cache")
    assert _fleet("rensei_routing.fleet.report", "rensei_routing.control.server")
    assert _fleet("rensei_routing.fleet.ingest", "rensei_routing.cli._root")
    assert not _fleet("rensei_routing.fleet.ingest", "rensei_routing.store.notes")
    assert _sides("rensei_routing.console.app", "rensei_routing.cli._root")
    assert _old_paths("rensei_routing.cli.host", "rensei_routing.core.authz")
    assert _commands("rensei_routing.cli.quickstart", "rensei_routing.cli.host")
    assert not _commands("rensei_routing.cli.quickstart", "rensei_routing.cli._render")


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan); the modules are
    the keys of ``edges`` (an import of anything else is no edge)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in edges:
        if v not in index:
            visit(v)
    return out


def _without_packages(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """A package's ``__init__`` re-exporting its modules is not a cycle with them: drop the
    edge from a module to its own enclosing packages."""
    return {m: {t for t in ts if not m.startswith(t + ".")} for m, ts in edges.items()}


def _import_cycles(modules: dict[str, Path] = MODULES) -> list[list[str]]:
    """The import cycles among ``modules``, counting every import that can run: at module level
    and inside functions (an import deferred into a function still makes the two modules depend
    on each other; deferring it only hides the cycle from the interpreter).

    Imports under ``if TYPE_CHECKING:`` are left out: they never run, and with ``from
    __future__ import annotations`` they only name a type in an annotation; two modules naming
    each other's types that way (``core.routing.decision`` names ``ids.ScanMemo``, ``ids``
    imports ``decision``) depend on each other for the type checker only."""
    return _cycles(_without_packages(_edges(modules=modules)))


def test_no_import_cycle_among_modules() -> None:
    """No two modules import each other, directly or round a longer loop, whether the imports
    run at import time or inside a function (:func:`_import_cycles`)."""
    assert _import_cycles() == []


def test_the_cycle_check_finds_a_cycle() -> None:
    a, b = "rensei_routing.core.canonical", "rensei_routing.core._parse"
    assert _cycles({a: {b}, b: {a}}) == [sorted([a, b])]


def _plant(root: Path, files: dict[str, str]) -> dict[str, Path]:
    package = root / "rensei_routing"
    for name, source in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
    return _modules(package)


def test_the_cycle_check_finds_a_cycle_planted_inside_functions(tmp_path: Path) -> None:
    """Two modules of a real package on disk that import each other only inside functions
    (one ``from . import``, one absolute ``import_module``) are a cycle; the same two with one
    of the imports under ``if TYPE_CHECKING:`` are not, nor is a package's ``__init__``
    re-exporting its module."""
    planted = _plant(
        tmp_path,
        {
            "__init__.py": '"""Root."""\n',
            "side/__init__.py": '"""Side."""\nfrom .a import f\n',
            "side/a.py": "def f():\n    from .b import g\n    return g\n",
            "side/b.py": (
                "import importlib\n"
                "def g():\n"
                "    return importlib.import_module('rensei_routing.side.a')\n"
            ),
        },
    )
    a, b = "rensei_routing.side.a", "rensei_routing.side.b"
    assert _cycles(_without_packages(_edges(modules=planted, top_level_only=True))) == []
    assert _import_cycles(planted) == [[a, b]]

    typed_only = _plant(
        tmp_path,
        {
            "side/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n"
                "    from .a import f\n"
                "def g(x: 'f') -> None:\n"
                "    return None\n"
            )
        },
    )
    assert _import_cycles(typed_only) == []


def test_no_module_over_600_lines() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in MODULES.values()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_module_and_package_opens_with_a_docstring() -> None:
    missing = [
        str(p.relative_to(ROOT))
        for p in MODULES.values()
        if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))
    ]
    assert missing == []


def _packages() -> set[str]:
    return {
        str(p.parent.relative_to(PACKAGE)).replace("\\", "/")
        for p in PACKAGE.rglob("__init__.py")
        if p.parent != PACKAGE
    }


def test_architecture_md_names_every_package_and_only_real_ones() -> None:
    """The doc's package table (rows starting with a package path in backquotes) matches the
    tree: every package it names exists, every package of the tree is named."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `rensei_routing/([a-z_/]+)/` \|", text, flags=re.M))
    assert named, "docs/architecture.md has no package table"
    assert named - _packages() == set(), "named but not in the tree"
    assert _packages() - named == set(), "in the tree but not named"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # old paths warn
def test_every_old_path_resolves_to_its_module_and_has_type_stubs() -> None:
    import importlib

    for old, new in MOVED.items():
        news = new if isinstance(new, tuple) else (new,)
        loaded = importlib.import_module(old)
        if len(news) == 1:
            assert loaded is importlib.import_module(news[0]), old
        for name in news:  # every name the new modules export is there, the same object
            module = importlib.import_module(name)
            for exported in getattr(module, "__all__", ()):
                assert getattr(loaded, exported) is getattr(module, exported), (old, exported)
        parts = old.split(".")[1:]
        stub = PACKAGE.joinpath(*parts).with_suffix(".pyi")
        package_stub = PACKAGE.joinpath(*parts, "__init__.pyi")
        assert stub.is_file() or package_stub.is_file(), f"no type stub for {old}"
        found = stub if stub.is_file() else package_stub
        for name in news:
            assert f"from {name} import *" in found.read_text(encoding="utf-8")
        assert not PACKAGE.joinpath(*parts).with_suffix(".py").exists(), f"{old} is a module"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # old paths warn
def test_a_split_modules_old_path_keeps_every_name_it_exported() -> None:
    from rensei_routing.core import context, decision  # type: ignore[attr-defined]

    for name in ("ConsideredPolicy", "Explanation", "RejectedAccount", "RouteDecision"):
        assert hasattr(decision, name), name
    for name in ("CANONICAL", "LEGACY_LOSSY", "Account", "LegacyRoute", "ModelRequirement"):
        assert hasattr(context, name), name
    assert hasattr(context, "RepoIdentity") and hasattr(context, "canonicalize_repo")
    assert hasattr(context, "RouteContext")

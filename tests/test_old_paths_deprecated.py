"""The module paths of before the re-layout (``rensei_routing/_moved.py``) still import, and warn:
a ``DeprecationWarning`` naming the new path and the release that removes the old one, once per
path and process, attributed to the line that imported it. Nothing we ship uses an old path:
every module of the package and of the two shipped plugins imports with DeprecationWarning an
error, and no test or plugin source names an old path (the package itself: tests/test_layering.py,
rule ``no-old-paths``).

The import checks run in fresh interpreters: the warning is given once per process, and this
process may have imported an old path already.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rensei_routing._moved import MOVED, REMOVED_IN, deprecation_message

ROOT = Path(__file__).resolve().parent.parent
#: The shipped plugins' import packages (each in plugins/<distribution>/).
SHIPPED_PLUGINS = {
    "rensei_seams_hydraflow": ROOT / "plugins" / "rensei-seams-hydraflow",
    "rensei_authz_cedar": ROOT / "plugins" / "rensei-authz-cedar",
}
#: Test files that import old paths on purpose (to check that they still resolve, and warn).
IMPORTS_OLD_PATHS_ON_PURPOSE = frozenset({"test_layering.py", "test_old_paths_deprecated.py"})

#: Imports each old path given on the command line, twice, recording the warnings of each try.
_IMPORT_EACH = """
import importlib, json, sys, warnings
warnings.simplefilter("always")
seen = {}
for old in sys.argv[1:]:
    tries = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            importlib.import_module(old)
        tries.append([[w.category.__name__, str(w.message), w.filename] for w in caught])
    seen[old] = tries
print(json.dumps(seen))
"""

#: Imports every module of the named packages (``__main__`` modules excepted: they run).
_IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys
count = 0
for top in sys.argv[1:]:
    package = importlib.import_module(top)
    count += 1
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        importlib.import_module(info.name)
        count += 1
print(count)
"""


def _python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
        timeout=300,
    )


def test_every_old_path_warns_once_naming_its_new_path(tmp_path: Path) -> None:
    done = _python("-c", _IMPORT_EACH, *sorted(MOVED), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    for old, (first, second) in seen.items():
        mine = [w for w in first if w[1].startswith(f"{old} is deprecated")]
        assert len(mine) == 1, (old, first)
        category, message, filename = mine[0]
        assert category == "DeprecationWarning"
        assert message == deprecation_message(old)
        news = MOVED[old] if isinstance(MOVED[old], tuple) else (MOVED[old],)
        assert all(new in message for new in news), message
        assert f"removed in {REMOVED_IN}" in message
        # attributed to the importing line (here: the -c script), not to the import machinery
        assert filename == "<string>", (old, filename)
        # any other warning of the first import is a parent old path's, imported with it
        for other in first:
            assert other[1].split(" ", 1)[0] in MOVED and old.startswith(other[1].split(" ")[0])
        assert second == [], (old, second)  # once per path: the second import is quiet


def test_the_warning_names_the_importing_file_and_line(tmp_path: Path) -> None:
    """Python's default filters show a DeprecationWarning only when it is attributed to
    ``__main__``: a script importing an old path sees it, with its own file and line."""
    script = tmp_path / "uses_old_path.py"
    script.write_text("import os\nimport rensei_routing.hookspecs\nprint('ran')\n")
    done = _python(str(script), cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "ran\n", done.stderr
    assert f"{script}:2: DeprecationWarning: rensei_routing.hookspecs is deprecated" in done.stderr
    assert "rensei_routing.plugins.hookspecs" in done.stderr


def test_an_old_path_under_warnings_as_errors_fails_its_import(tmp_path: Path) -> None:
    """Not vacuous: the flag the next test runs under does turn an old path into a failure."""
    done = _python(
        "-W", "error::DeprecationWarning", "-c", "import rensei_routing.doctor", cwd=tmp_path
    )
    assert done.returncode == 1
    assert "DeprecationWarning: rensei_routing.doctor is deprecated" in done.stderr
    assert "rensei_routing.ops.doctor" in done.stderr


def test_every_module_we_ship_imports_with_deprecation_warnings_as_errors(tmp_path: Path) -> None:
    packages = ["rensei_routing", *SHIPPED_PLUGINS]
    done = _python(
        "-W", "error::DeprecationWarning", "-c", _IMPORT_EVERY_MODULE, *packages, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout) > 150  # every module, not just the packages


def _old_path_imports(path: Path) -> list[str]:
    """The old paths a source file imports (``import X``, ``from X import y``, and
    ``from parent import name`` where ``parent.name`` is an old path)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in MOVED]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in MOVED:
                found.append(node.module)
            found += [
                f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MOVED
            ]
    return found


def _sources() -> list[Path]:
    files = sorted((ROOT / "tests").rglob("*.py"))
    for root in SHIPPED_PLUGINS.values():
        files += sorted(p for p in root.rglob("*.py") if ".egg-info" not in str(p))
    return [p for p in files if p.name not in IMPORTS_OLD_PATHS_ON_PURPOSE]


def test_no_test_nor_shipped_plugin_imports_an_old_path() -> None:
    sources = _sources()
    assert len(sources) > 150
    offenders = {
        str(p.relative_to(ROOT)): found for p in sources if (found := _old_path_imports(p))
    }
    assert offenders == {}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import rensei_routing.hookspecs\n", ["rensei_routing.hookspecs"]),
        ("from rensei_routing.core.authz import x\n", ["rensei_routing.core.authz"]),
        ("from rensei_routing.core import decision, routing\n", ["rensei_routing.core.decision"]),
        ("from rensei_routing.core.routing import decision\n", []),
        ("from rensei_routing.plugins import hookspecs\n", []),
    ],
)
def test_the_source_check_finds_old_paths(tmp_path: Path, source: str, expected: list[str]) -> None:
    path = tmp_path / "sample.py"
    path.write_text(source)
    assert _old_path_imports(path) == expected


def test_the_changelog_lists_every_old_path_for_removal() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    deprecated = text.split("### Deprecated", 1)[1].split("\n### ", 1)[0]
    assert f"removed in {REMOVED_IN}" in deprecated
    missing = [old for old in MOVED if f"`{old.removeprefix('rensei_routing.')}`" not in deprecated]
    assert missing == []

"""Lazy plugin loading (issue 22, edge 20): installed plugins are read from their entry points
and each is imported only when a hook it implements (as its ``rensei_routing.hooks`` entry points
declare) is called; an undeclared plugin is imported when any hook is called; a declaration that
is not what the plugin implements is an error naming it. ``rensei --help`` imports no plugin,
no pluggy and no plugin manager (its start-up time is the ``cli-start`` benchmark's)."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.cli._session import Session
from rensei_routing.core.redact import DEFAULT_REDACTOR
from rensei_routing.core.routing.vocabulary import DEFAULT_VOCABULARY
from rensei_routing.errors import PluginError
from rensei_routing.plugins.entrypoints import BUILTIN_HOOKS, installed_plugins
from rensei_routing.plugins.manager import get_plugin_manager, redactor, vocabulary
from rensei_routing.store.home import Home

SEAMS = """
from rensei_routing import hookimpl
from rensei_routing.core.shadow.compare import Seam

@hookimpl
def register_seams(register):
    register(Seam(name="lazy-seam", request_face="agentic", stages=("default", "role-dial")))
"""

Install = Callable[..., str]
EXAMPLES = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Install:
    """``install(name, source, hooks=None)``: a real installed plugin distribution declaring
    ``hooks`` (``None``: no declaration); returns its module name."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def _install(name: str, source: str, hooks: tuple[str, ...] | None = None) -> str:
        module = f"rrl_{name}_{uuid.uuid4().hex[:8]}"
        (site / f"{module}.py").write_text(source)
        info = site / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
        text = f"[rensei_routing]\n{name} = {module}\n"
        if hooks is not None:
            text += "[rensei_routing.hooks]\n" + "".join(
                f"{name}.{h} = {module}:{h}\n" for h in hooks
            )
        (info / "entry_points.txt").write_text(text)
        return module

    return _install


def _rensei(*args: str, load: str) -> Result:
    env = {"RENSEI_ROUTING_LOAD_PLUGINS": load}
    return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)


def test_a_declared_plugin_is_imported_only_when_a_hook_it_implements_is_called(
    install: Install,
) -> None:
    module = install("lazy", SEAMS, hooks=("register_seams",))
    helped = _rensei("--help", load="lazy")
    assert helped.exit_code == 0 and "explain" in helped.stdout
    explained = _rensei("explain", "{}", "--json", load="lazy")  # vocabulary, never seams
    assert explained.exit_code == 0, explained.output
    assert module not in sys.modules
    listed = _rensei("seams", "list", load="lazy")
    assert listed.exit_code == 0 and "lazy-seam\tlazy\t" in listed.stdout
    assert module in sys.modules


def test_an_undeclared_plugin_is_imported_when_any_hook_is_called(install: Install) -> None:
    module = install("eager", SEAMS)
    pm = get_plugin_manager(names=("eager",), lazy=True)
    assert module not in sys.modules and set(pm.pending) == {"eager"}
    vocabulary(pm)
    assert module in sys.modules and pm.pending == {} and pm.has_plugin("eager")


def test_plugins_list_imports_every_pending_plugin(install: Install) -> None:
    install("lazy", SEAMS, hooks=("register_seams",))
    result = _rensei("plugins", "list", load="lazy")
    assert result.exit_code == 0
    assert any(line.startswith("lazy\t") for line in result.stdout.splitlines())


@pytest.mark.parametrize(
    "declared",
    [("register_vocabulary",), ("register_seams", "register_vocabulary"), ("register_seam",)],
    ids=["other-hook", "one-too-many", "misspelled"],
)
def test_a_declaration_that_is_not_what_the_plugin_implements_names_it(
    install: Install, declared: tuple[str, ...]
) -> None:
    install("liar", SEAMS, hooks=declared)
    result = _rensei("plugins", "list", load="liar")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: plugin 'liar' (rrl_liar_")
    assert "implements register_seams but declares" in result.stderr
    assert result.stderr.count("\n") == 1


def test_a_failed_lazy_load_fails_every_later_hook_call_too(install: Install) -> None:
    install("crashy", "raise ImportError('missing dependency acme-sdk')\n")
    pm = get_plugin_manager(names=("crashy",), lazy=True)
    for _ in range(2):
        with pytest.raises(PluginError, match=r"plugin 'crashy'.*missing dependency acme-sdk"):
            vocabulary(pm)


def test_the_built_in_hooks_table_is_what_the_built_ins_implement() -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    for name, hooks in BUILTIN_HOOKS.items():
        plugin = importlib.import_module(name)
        assert {c.name for c in pm.get_hookcallers(plugin) or []} == hooks


def test_the_entry_point_reader_agrees_with_importlib_metadata(install: Install) -> None:
    install("lazy", SEAMS, hooks=("register_seams",))
    module = install("eager", SEAMS)
    expected = sorted(
        (ep.name, ep.value) for ep in importlib.metadata.entry_points(group="rensei_routing")
    )
    found = installed_plugins()
    assert sorted((p.name, p.value) for p in found) == expected
    by_name = {p.name: p for p in found}
    assert by_name["lazy"].hooks == frozenset({"register_seams"})
    assert (by_name["eager"].hooks, by_name["eager"].distribution) == (None, module)
    assert by_name["eager"].version == "0.1"


def test_help_imports_no_plugin_nor_pluggy_with_the_shipped_plugins_installed() -> None:
    names = {p.name for p in installed_plugins()}
    if not {"cedar", "hydraflow"} <= names:
        pytest.skip("the shipped plugins are not installed in this environment")
    code = (
        "import sys\n"
        "from rensei_routing.cli import cli\n"
        "try:\n"
        "    cli(['--help'], prog_name='rensei')\n"
        "except SystemExit:\n"
        "    pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pluggy', 'rensei_authz_cedar', 'rensei_seams_hydraflow', 'importlib_metadata')"
        " or m in ('rensei_routing.plugins.manager', 'rensei_routing.core.routing.vocabulary'))\n"
        "print('IMPORTED', bad, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert "Commands:" in done.stdout
    assert "IMPORTED []" in done.stderr, done.stderr


# -- the shipped vocabulary and redactor without the manager ----------------------------------

ROLE = """
from rensei_routing import hookimpl
from rensei_routing.plugin import VocabularyExtension

@hookimpl
def register_vocabulary(register):
    register(VocabularyExtension(roles=frozenset({"lazy-role"})))
"""

PATTERN = """
import re
from rensei_routing import hookimpl
from rensei_routing.core.redact import RedactionPattern

@hookimpl
def register_redaction_patterns(register):
    register(RedactionPattern("lazy-token", re.compile(r"lazytok-[0-9]{6}"), ("lazytok-",)))
"""


def test_the_shipped_answers_are_the_managers_with_only_built_ins() -> None:
    # What a session takes without the manager is what the manager answers when no installed
    # plugin contributes: equal values, and the same redactor.
    pm = get_plugin_manager(load_entrypoints=False)
    assert vocabulary(pm) == DEFAULT_VOCABULARY
    assert vocabulary(pm)._provenances == DEFAULT_VOCABULARY._provenances
    assert redactor(pm) is DEFAULT_REDACTOR
    for load_entrypoints in (False, True):
        s = Session(load_entrypoints=load_entrypoints)
        assert s.vocabulary() == vocabulary(get_plugin_manager(load_entrypoints=load_entrypoints))
        assert s.redactor() is redactor(get_plugin_manager(load_entrypoints=load_entrypoints))


def test_a_plugin_declaring_neither_hook_is_not_imported_for_the_vocabulary_or_redactor(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = install("seamy", SEAMS, hooks=("register_seams",))
    monkeypatch.setenv("RENSEI_ROUTING_LOAD_PLUGINS", "seamy")
    s = Session(load_entrypoints=True)
    assert s.vocabulary() is DEFAULT_VOCABULARY and s.redactor() is DEFAULT_REDACTOR
    assert s._pm is None and module not in sys.modules
    assert "lazy-seam" in s.seams().seams  # the manager, built when a hook needs it
    assert module in sys.modules


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
def test_a_plugin_that_may_contribute_is_heard(
    install: Install, monkeypatch: pytest.MonkeyPatch, declared: bool
) -> None:
    install("roles", ROLE, hooks=("register_vocabulary",) if declared else None)
    install("tokens", PATTERN, hooks=("register_redaction_patterns",) if declared else None)
    monkeypatch.setenv("RENSEI_ROUTING_LOAD_PLUGINS", "roles,tokens")
    s = Session(load_entrypoints=True)
    assert "lazy-role" in s.vocabulary().roles
    assert s.redactor().redact("x lazytok-123456 y") == "x [REDACTED:lazy-token] y"
    # one not allowed is not heard, and needs no manager
    monkeypatch.setenv("RENSEI_ROUTING_LOAD_PLUGINS", "")
    s = Session(load_entrypoints=True)
    assert s.vocabulary() is DEFAULT_VOCABULARY and s.redactor() is DEFAULT_REDACTOR
    assert s._pm is None


def test_a_plugin_name_installed_twice_is_still_refused(
    install: Install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("twice", SEAMS, hooks=("register_seams",))
    install("twice", SEAMS, hooks=("register_seams",))
    monkeypatch.setenv("RENSEI_ROUTING_LOAD_PLUGINS", "twice")
    with pytest.raises(PluginError, match="twice"):
        Session(load_entrypoints=True).vocabulary()


@pytest.mark.parametrize("json_", [False, True], ids=["text", "json"])
def test_explain_with_the_shipped_answers_is_explain_with_the_manager(
    tmp_path: Path, json_: bool
) -> None:
    home = Home(tmp_path / "home")
    home.init(org="lazy")
    runner = CliRunner()
    at = ["--home", str(home.path)]
    saved = runner.invoke(cli, ["policy", "save", str(EXAMPLES / "policies.json"), *at])
    assert saved.exit_code == 0, saved.output
    args = ["explain", str(EXAMPLES / "context.json"), *at, *(["--json"] if json_ else [])]
    plain = runner.invoke(cli, args, obj=get_plugin_manager(lazy=True), catch_exceptions=False)
    fast = runner.invoke(cli, args, catch_exceptions=False)
    assert plain.exit_code == fast.exit_code == 0
    assert fast.stdout == plain.stdout and fast.stdout.count("\n") > 3


def test_explain_imports_neither_the_plugin_machinery_nor_what_only_writers_need(
    tmp_path: Path,
) -> None:
    names = {p.name for p in installed_plugins()}
    if not {"cedar", "hydraflow"} <= names:
        pytest.skip("the shipped plugins are not installed in this environment")
    home = Home(tmp_path / "home")
    home.init(org="lazy")
    code = (
        "import sys\n"
        "from rensei_routing.cli import cli\n"
        "try:\n"
        "    cli(sys.argv[1:], prog_name='rensei')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('pluggy', 'rensei_authz_cedar', 'rensei_seams_hydraflow', 'apsw.ext',"
        " 'apsw.bestpractice', 'zstandard', 'tomllib', 'shutil', 'logging',"
        " 'rensei_routing.plugins.manager', 'rensei_routing.core.shadow.compare',"
        " 'rensei_routing.core.routing.edits', 'rensei_routing.core.routing.validation',"
        " 'rensei_routing.core.audit.chain', 'rensei_routing.store.snapshots')\n"
        "print('IMPORTED', sorted(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    args = ["--home", str(home.path), "explain", str(EXAMPLES / "context.json")]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.stdout.startswith(("selected", "held", "rejected")), done.stderr
    assert "IMPORTED []" in done.stderr, done.stderr

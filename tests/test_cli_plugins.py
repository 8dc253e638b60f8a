"""``rensei plugins ...``, ``rensei seams ...``, ``--no-plugins``, ``RENSEI_ROUTING_LOAD_PLUGINS``
and the commands that use what plugins contribute (vocabulary, redaction, observers, commands).

Installed plugins are real: a distribution's metadata (``*.dist-info`` with ``entry_points.txt``)
is written onto ``sys.path``, so ``importlib.metadata`` finds it exactly as it finds one pip
installed; in-process runs hand the CLI a manager as its context object instead."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from rensei_routing.cli import cli
from rensei_routing.plugins.testing import plugin_manager_for

from .plugins import sample

GOOD = """
from rensei_routing import hookimpl
from rensei_routing.core.shadow.compare import Seam

@hookimpl
def register_seams(register):
    register(Seam(name="ep-seam", request_face="agentic", stages=("default", "role-dial")))
"""
MISSPELLED = """
from rensei_routing import hookimpl

@hookimpl
def register_seam(register):
    pass
"""
FRAGILE = """
from rensei_routing import hookimpl
from rensei_routing.core.shadow.compare import Seam

def classify(stages):
    if len(stages) > 1:
        raise RuntimeError("two stages are too many")
    return stages[0]

@hookimpl
def register_seams(register):
    register(Seam(name="fragile-ep", request_face="agentic", stages=("default", "role-dial"),
                  classifier=classify))
"""

Install = Callable[[str, str], str]


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Install:
    """``install(entry_point_name, module_source)``: a real installed plugin distribution."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))

    def _install(name: str, source: str) -> str:
        module = f"rrt_{name.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
        (site / f"{module}.py").write_text(source)
        info = site / f"{module}-1.2.3.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.2.3\n")
        (info / "entry_points.txt").write_text(f"[rensei_routing]\n{name} = {module}\n")
        return module

    return _install


def _rensei(*args: str, load: str | None = None, obj: object = None) -> Result:
    env = {"RENSEI_ROUTING_LOAD_PLUGINS": load}
    return CliRunner().invoke(cli, list(args), env=env, obj=obj, catch_exceptions=False)


def _seam_names(*args: str, load: str | None = None) -> set[str]:
    result = _rensei(*args, "seams", "list", "--json", load=load)
    assert result.exit_code == 0, result.output
    return {row["name"] for row in json.loads(result.stdout)}


# -- loading installed plugins ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("load", "args", "loaded"),
    [
        (None, (), True),
        ("good", (), True),
        ("other, good", (), True),
        ("", (), False),
        ("other", (), False),
        (None, ("--no-plugins",), False),
        ("good", ("--no-plugins",), False),
    ],
    ids=["unset", "named", "listed", "empty", "another", "no-plugins", "no-plugins-wins"],
)
def test_load_plugins_env_and_no_plugins_restrict_installed_plugins(
    install: Install, load: str | None, args: tuple[str, ...], loaded: bool
) -> None:
    install("good", GOOD)
    names = _seam_names(*args, load=load)
    assert ("ep-seam" in names) is loaded
    assert "default" in names  # built-ins always load


def test_plugins_list_shows_distribution_version_and_hooks(install: Install) -> None:
    module = install("good", GOOD)
    result = _rensei("plugins", "list", "--json", load="good")
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["good"] == {
        "name": "good",
        "distribution": module,
        "version": "1.2.3",
        "hooks": ["register_seams"],
        "builtin": False,
    }
    text = _rensei("plugins", "list", load="good").stdout
    assert f"good\t{module} 1.2.3\tregister_seams\n" in text


def test_a_broken_installed_plugin_fails_loudly_by_name_never_with_a_traceback(
    install: Install,
) -> None:
    install("typo", MISSPELLED)
    result = _rensei("explain", "{}", load="typo")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: plugin 'typo': unknown hook 'register_seam'")
    assert result.stderr.count("\n") == 1
    # --help still works (built-ins listed, one warning line), and --no-plugins runs clean
    helped = _rensei("--help", load="typo")
    assert helped.exit_code == 0 and "explain" in helped.stdout
    assert helped.stderr.startswith("warning: plugin commands not listed: plugin 'typo'")
    assert _rensei("--no-plugins", "explain", "{}", "--json", load="typo").exit_code == 0


def test_a_plugin_that_cannot_be_imported_is_named(install: Install) -> None:
    install("crashy", "raise ImportError('missing dependency acme-sdk')\n")
    result = _rensei("seams", "list", load="crashy")
    assert result.exit_code == 1
    assert "plugin 'crashy'" in result.stderr and "missing dependency acme-sdk" in result.stderr


# -- plugins check ------------------------------------------------------------------------------


def test_plugins_check_passes_a_good_plugin_even_when_the_env_excludes_it(install: Install) -> None:
    install("good", GOOD)
    result = _rensei("plugins", "check", "good", load="")
    assert (result.exit_code, result.stdout) == (0, "ok: plugin 'good'\n")


@pytest.mark.parametrize(
    ("name", "source", "line"),
    [
        (
            "fragile",
            FRAGILE,
            "seam fragile-ep: plugin 'fragile': seam 'fragile-ep' classifier is "
            "not total: on [default:",
        ),
        ("typo", MISSPELLED, "load: plugin 'typo': unknown hook 'register_seam'"),
        ("absent", None, "no installed plugin named 'absent' (entry point group rensei_routing)"),
    ],
    ids=["classifier-not-total", "misspelled-hook", "not-installed"],
)
def test_plugins_check_reports_each_problem_on_one_line(
    install: Install, name: str, source: str | None, line: str
) -> None:
    if source is not None:
        install(name, source)
    result = _rensei("plugins", "check", name, "--examples", "50")
    assert result.exit_code == 1
    (problem,) = result.stdout.splitlines()
    assert problem.startswith(line)
    assert result.stderr == f"Error: plugin {name!r}: 1 problem(s)\n"


# -- what plugins contribute, as the commands use it --------------------------------------------


def test_seams_list_shows_each_seam_with_its_plugin_face_and_stages() -> None:
    result = _rensei("seams", "list", obj=plugin_manager_for(sample, "sample"))
    assert result.stdout.splitlines() == [
        "default\trensei_routing.plugins.default.seams\tunknown\tdefault",
        "sample-batch\tsample\tone-shot\tdefault > nightly-window > credit-failover",
    ]


def test_plugin_commands_run_and_are_listed_only_with_their_plugin() -> None:
    pm = plugin_manager_for(sample, "sample")
    assert _rensei("sample", "hello", obj=pm).stdout == "hello from sample\n"
    assert "sample " in _rensei("--help", obj=pm).stdout
    assert "sample " not in _rensei("--help").stdout
    assert _rensei("sample", "hello").exit_code == 2  # no such command without the plugin


def test_policies_and_contexts_are_read_with_the_plugin_vocabulary(tmp_path: Path) -> None:
    policies = tmp_path / "policies.json"
    policies.write_text(
        json.dumps(
            [
                {
                    "id": "auditors-pinned",
                    "match": {"roles": ["auditor"]},
                    "action": {"provider_lock": "acme-cloud"},
                }
            ]
        )
    )
    context = json.dumps(
        {
            "principal_id": "auditor",
            "accounts": [{"account_id": "acme-1", "provider_binding": "acme-cloud"}],
        }
    )
    pm = plugin_manager_for(sample, "sample")
    chosen = _rensei("explain", context, "--policies", str(policies), "--json", obj=pm)
    assert chosen.exit_code == 0, chosen.output
    decision = json.loads(chosen.stdout)
    assert (decision["policy_id"], decision["account_id"]) == ("auditors-pinned", "acme-1")
    assert _rensei("policy", "validate", str(policies), obj=pm).exit_code == 0
    without = _rensei("policy", "validate", str(policies))
    assert without.exit_code == 1 and "roles[0]" in without.stdout  # listed, as every problem


def _init_home() -> None:
    assert _rensei("init").exit_code == 0


def test_recording_redacts_with_plugin_patterns_and_notifies_observers() -> None:
    _init_home()
    observer = sample.SampleObserver()
    pm = plugin_manager_for(sample, "sample")
    pm.register(observer, name="observer")
    context = json.dumps({"principal_id": "bot acme_ABCDEFGHIJKLMNOPQRST"})
    result = CliRunner().invoke(
        cli, ["explain-batch", "-", "--record"], input=context + "\n" + context + "\n", obj=pm
    )
    assert result.exit_code == 0, result.output
    tail = json.loads(_rensei("audit", "tail", "--json").stdout)
    assert [r["seq"] for r in tail] == [0, 1]
    assert tail[0]["payload"]["explanation"]["context"]["principal_id"] == (
        "bot [REDACTED:acme-token]"
    )
    assert observer.seen == [(r["seq"], r["record_hash"]) for r in tail]


def test_a_failing_observer_never_fails_or_undoes_the_append() -> None:
    _init_home()
    pm = plugin_manager_for(sample.SampleObserver(fail=True), "flaky")
    result = _rensei("explain", "{}", "--record", obj=pm)
    assert result.exit_code == 0
    assert result.stderr == (
        "warning: plugin 'flaky' failed observing audit record 0: RuntimeError: observer is down\n"
    )
    assert _rensei("audit", "verify").stdout.startswith("intact: 1 records")

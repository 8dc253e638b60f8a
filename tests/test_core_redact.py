"""Redaction: every credential kind, nested; idempotence; the pre-check never skips a match."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rensei_routing.core.canonical import canonical_bytes
from rensei_routing.core.redact import (
    DEFAULT_PATTERNS,
    DEFAULT_REDACTOR,
    RedactionPattern,
    Redactor,
    marker,
    redact,
)
from rensei_routing.errors import ConfigurationError

PEM_RSA = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi3Yzo0kZ4eBfIQ8ZvfYkHRjQJ\n"
    "-----END RSA PRIVATE KEY-----"
)
PEM_OPENSSH = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)

#: (id, text containing the credential, the secret part that must disappear, label)
CREDENTIALS: list[tuple[str, str, str, str]] = [
    ("ghp", "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngPurp0s3s", "R4nd0mT0k3nV4lu3F0r", "github-token"),
    ("gho", "gho_16C7e42F292c6912E7710c838347Ae178B4a", "16C7e42F292c6912E77", "github-token"),
    ("ghu", "ghu_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Jh1Gf0EdCbA9", "Zx9Yw8Vu7Ts6Rq5Po4Nm", "github-token"),
    ("ghs", "ghs_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "aBcDeFgHiJkLmNoPqRsT", "github-token"),
    ("ghr", "ghr_1B4a2e77838347a7E420ce178F2E7c6912E1", "1B4a2e77838347a7E420", "github-token"),
    (
        "github_pat",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW",
        "0123456789_abcdefghijkl",
        "github-pat",
    ),
    ("aws_akia", "AKIAQWERTYUIOP123456", "QWERTYUIOP123456", "aws-access-key-id"),
    ("aws_asia", "ASIAZXCVBNMLKJHGFDSA", "ZXCVBNMLKJHGFDSA", "aws-access-key-id"),
    (
        "aws_secret",
        "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
        "wJalrXUtnFEMI/K7MDENG",
        "aws-secret-access-key",
    ),
    ("slack_bot", "xoxb-2048-1357924680-AbCdEfGhIjKlMnOp", "1357924680-AbCdEfGh", "slack-token"),
    ("slack_user", "xoxp-1111-2222-3333-q1w2e3r4t5y6u7i8", "q1w2e3r4t5y6u7i8", "slack-token"),
    (
        "anthropic",
        "sk-ant-api03-Zm9vYmFyYmF6cXV4cXV1eDEyMzQ1Njc4OTA-AbCdEf",
        "Zm9vYmFyYmF6cXV4cXV1eDEy",
        "anthropic-api-key",
    ),
    (
        "sk_generic",
        "sk-proj-4f9c2b7e1a0d3c5b8e6f9a2d4c7b0e3f",
        "4f9c2b7e1a0d3c5b8e6f9a2d",
        "sk-api-key",
    ),
    ("pem_rsa", PEM_RSA, "MIIEowIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9", "private-key"),
    ("pem_openssh", PEM_OPENSSH, "b3BlbnNzaC1rZXktdjEAAAAABG5v", "private-key"),
    (
        "password_assign",
        "password = 'hunter2-correct-horse'",
        "hunter2-correct-horse",
        "secret-assignment",
    ),
    ("token_colon", 'token: "tkn-8f7e6d5c4b3a"', "tkn-8f7e6d5c4b3a", "secret-assignment"),
    ("api_key_env", "API_KEY=zq8Yv7Xw6Ut5", "zq8Yv7Xw6Ut5", "secret-assignment"),
    ("secret_json", '{"client_secret": "s3cr3t-v4lue-42"}', "s3cr3t-v4lue-42", "secret-assignment"),
]
IDS = [c[0] for c in CREDENTIALS]


def _nest(text: str) -> dict[str, object]:
    return {
        "decision": {
            "outcome": "selected",
            "notes": [1, None, True, {"deep": [f"before {text} after"]}],
        },
        "legacy": [[f"{text}"]],
    }


@pytest.mark.parametrize(("name", "text", "secret", "label"), CREDENTIALS, ids=IDS)
def test_each_credential_kind_is_redacted_wherever_it_is_nested(
    name: str, text: str, secret: str, label: str
) -> None:
    out = redact(_nest(text))
    encoded = canonical_bytes(out).decode("utf-8")
    assert secret not in encoded
    assert marker(label) in encoded
    assert out["decision"]["notes"][:3] == [1, None, True]  # type: ignore[index]
    assert out["decision"]["outcome"] == "selected"  # type: ignore[index]


@pytest.mark.parametrize(("name", "text", "secret", "label"), CREDENTIALS, ids=IDS)
def test_redaction_is_idempotent_and_leaves_no_match(
    name: str, text: str, secret: str, label: str
) -> None:
    once = redact(_nest(text))
    assert redact(once) == once
    for s in _strings(once):
        for p in DEFAULT_PATTERNS:
            assert p.regex.search(s) is None, (p.label, s)


def test_text_around_a_match_survives() -> None:
    assert redact("use ghp_" + "a1" * 18 + " here") == "use [REDACTED:github-token] here"
    assert redact("password = 'x1y2z3'") == "password = '[REDACTED:secret-assignment]'"


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "db_password",
        "clientSecret",
        "api-key",
        "apiKey",
        "githubToken",
        "secrets",
        "private_key",
        "credentials",
    ],
)
def test_string_leaves_under_a_secret_named_key_are_redacted(key: str) -> None:
    out = redact({"cfg": {key: "plainvalue", "other": "plainvalue"}})
    assert out == {"cfg": {key: marker("secret-field"), "other": "plainvalue"}}


def test_secret_named_key_reaches_nested_leaves_but_keeps_non_strings() -> None:
    out = redact({"credentials": {"user": "bob", "pin": 1234, "list": ["a", None]}})
    assert out == {
        "credentials": {
            "user": marker("secret-field"),
            "pin": 1234,
            "list": [marker("secret-field"), None],
        }
    }


@pytest.mark.parametrize("key", ["max_tokens", "token_count", "keyboard", "monkey", "policy_id"])
def test_ordinary_keys_are_not_secret(key: str) -> None:
    assert redact({key: "value"}) == {key: "value"}


def test_keys_are_left_untouched_documented_limit() -> None:
    key = "ghp_" + "K" * 36
    assert redact({key: 1}) == {key: 1}


def test_nothing_to_redact_returns_the_value_itself_and_never_mutates() -> None:
    value = {"a": ["repo-not-in-set", {"b": "acme/widgets"}], "n": 1.5}
    assert redact(value) is value
    dirty = {"a": ["ghp_" + "z" * 36]}
    snapshot = repr(dirty)
    assert redact(dirty) == {"a": [marker("github-token")]}
    assert repr(dirty) == snapshot


def test_tuples_stay_tuples_and_scalars_pass_through() -> None:
    assert redact(("xoxb-1234567890-abc", 3)) == (marker("slack-token"), 3)
    for scalar in (None, True, 0, 2.5):
        assert redact(scalar) is scalar


def test_markers_never_match_any_pattern() -> None:
    labels = {p.label for p in DEFAULT_PATTERNS} | {"secret-field"}
    for label in labels:
        for template in ("{m}", "password = '{m}'", "token={m}", 'api_key: "{m}"', "x{m}y"):
            text = template.format(m=marker(label))
            assert redact(text) == text


def test_sk_requires_a_digit_so_kebab_words_survive() -> None:
    text = "sk-learn-pipeline-configuration"
    assert redact(text) == text


def test_typical_decision_text_skips_every_regex() -> None:
    decision = {
        "decision_id": "sha256:" + "ab" * 32,
        "outcome": "selected",
        "reason": "matched-policy",
        "explanation": {"context": {"repo": "acme/widgets", "role": "implementer"}},
    }
    assert not DEFAULT_REDACTOR.might_match(canonical_bytes(decision).decode())


def test_custom_patterns_extend_the_defaults() -> None:
    extra = RedactionPattern("acme-ticket", re.compile(r"ACME-[0-9]{6}", re.ASCII), ("acme-",))
    value = {"t": "see ACME-123456 and ghp_" + "q" * 36}
    assert redact(value, (*DEFAULT_PATTERNS, extra)) == {
        "t": f"see {marker('acme-ticket')} and {marker('github-token')}"
    }
    assert redact(value)["t"].startswith("see ACME-123456")


def test_pattern_without_triggers_always_runs() -> None:
    extra = RedactionPattern("digits", re.compile(r"[0-9]{8}"))
    redactor = Redactor((extra,), secret_keys=None)
    assert redactor.triggers is None
    assert redactor.redact({"a": "id 12345678"}) == {"a": f"id {marker('digits')}"}


@pytest.mark.parametrize(
    ("label", "regex", "triggers"),
    [
        ("Bad Label", re.compile("x"), ()),
        ("ok", re.compile("x"), ("UPPER",)),
        ("ok", re.compile("x"), ('quo"te',)),
        ("ok", re.compile("x", re.IGNORECASE), ("x",)),
    ],
    ids=["label", "uppercase-trigger", "quote-trigger", "unicode-casefold"],
)
def test_pattern_definitions_are_checked(
    label: str, regex: re.Pattern[str], triggers: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigurationError):
        RedactionPattern(label, regex, triggers)


# -- properties ---------------------------------------------------------------------------------

FRAGMENTS = [
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "AKIA",
    "ASIA",
    "xoxb-",
    "xoxp-",
    "sk-",
    "sk-ant-",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "-----BEGIN ",
    " PRIVATE KEY-----",
    "password",
    "PassWord",
    "token",
    "secret",
    "api_key",
    "aws_",
    "aws_secret_access_key",
    "=",
    ": ",
    " = ",
    "'",
    '"',
    "[REDACTED:",
    "]",
    "[REDACTED:github-token]",
    "A" * 16,
    "a1" * 12,
    "Q7" * 20,
    "x" * 20,
    "0123456789",
    "/",
    "+",
    " ",
    "\n",
    "_",
    "-",
    "é",
]
_texts = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(alphabet="aA0_-= '\"[]:/+kKsS", max_size=6)),
    max_size=14,
).map("".join)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return []


@settings(max_examples=400, deadline=None)
@given(_texts)
def test_redaction_never_grows_a_match_back(text: str) -> None:
    once = DEFAULT_REDACTOR.redact_text(text)
    for p in DEFAULT_PATTERNS:
        assert p.regex.search(once) is None, (p.label, once)
    assert DEFAULT_REDACTOR.redact_text(once) == once


@settings(max_examples=400, deadline=None)
@given(_texts)
def test_the_precheck_never_skips_a_match(text: str) -> None:
    if any(p.regex.search(text) for p in DEFAULT_PATTERNS):
        assert DEFAULT_REDACTOR.might_match(text)


@settings(max_examples=150, deadline=None)
@given(
    st.recursive(
        _texts | st.integers() | st.none(),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(["a", "password", "note", "apiKey"]), inner, max_size=3
            )
        ),
        max_leaves=8,
    )
)
def test_nested_redaction_is_idempotent(value: object) -> None:
    once = redact(value)
    assert redact(once) == once

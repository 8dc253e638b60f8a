"""Redaction: every credential kind, nested; idempotence; the pre-check never skips a match."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
from rensei_routing.core.routing.context import RouteContext
from rensei_routing.core.routing.policy import PolicySnapshot
from rensei_routing.core.routing.resolver import explain
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

PEM_PKCS8 = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
    "-----END PRIVATE KEY-----"
)
PEM_ENCRYPTED = (
    "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkqhkiG9w0BBQwwHAQI\n"
    "-----END ENCRYPTED PRIVATE KEY-----"
)
PEM_EC = (
    "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIAZ2x9o8PQWERTYuiop1234567890asdfghjklzxcvbnm\n"
    "-----END EC PRIVATE KEY-----"
)
PGP_BLOCK = (
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGRkZGRkZGRkZGRkZGRkZGRkZGRk\n"
    "-----END PGP PRIVATE KEY BLOCK-----"
)
SSH2 = (
    '---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nComment: "rsa-key"\n'
    "P2/56wAAAi4AAAA3aWYtbW9kbnt7c2lnbn\n---- END SSH2 ENCRYPTED PRIVATE KEY ----"
)
PUTTY = (
    "PuTTY-User-Key-File-3: ssh-rsa\nEncryption: none\nComment: k\nPublic-Lines: 1\nAAAAB3Nza\n"
    "Private-Lines: 1\nAAAAgQCyZGRkZGRkZGRkZGRk\nPrivate-MAC: 0a1b2c3d4e5f"
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
    # issue 14: shapes that used to pass
    ("aws_lowercased", "akiaqwertyuiop123456/widgets", "qwertyuiop123456", "aws-access-key-id"),
    (
        "slack_app",
        "xapp-1-A0123456789-1234567890123-0a1b2c3d4e5f6a7b8c9d",
        "1234567890123-0a1b2c3d",
        "slack-token",
    ),
    (
        "slack_webhook",
        "https://hooks.slack.com/services/T0000AAAA/B0000BBBB/XXXXXXXXXXXXXXXXXXXXXXXX",
        "T0000AAAA/B0000BBBB/XXXXXXXX",
        "slack-webhook",
    ),
    (
        "url_userinfo",
        "https://deploy:Tr0ub4dor@git.example.com/x.git",
        "Tr0ub4dor",
        "url-credential",
    ),
    ("url_no_user", "redis://:hunter2@cache:6379/0", "hunter2", "url-credential"),
    (
        "authorization_bearer",
        "Authorization: Bearer abc.DEF_123",
        "abc.DEF_123",
        "authorization",
    ),
    ("authorization_basic", "authorization='Basic dXNlcjpwYXNz'", "dXNlcjpwYXNz", "authorization"),
    (
        "bearer_bare",
        "curl -H 'Bearer 9f8e7d6c5b4a39281706'",
        "9f8e7d6c5b4a39281706",
        "bearer-token",
    ),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
        "jwt",
    ),
    ("gitlab_pat", "glpat-xY9zW8vU7tS6rQ5pO4nM", "xY9zW8vU7tS6rQ5pO4nM", "gitlab-token"),
    (
        "google_api_key",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        "SyA1b2C3d4E5f6G7h8I9",
        "google-api-key",
    ),
    ("npm", "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "a1B2c3D4e5F6g7H8i9J0k1L2", "npm-token"),
    ("pem_pkcs8", PEM_PKCS8, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "private-key"),
    ("pem_encrypted", PEM_ENCRYPTED, "MIIFHDBOBgkqhkiG9w0BBQ0wQTApBgkq", "private-key"),
    ("pem_ec_lowercased", PEM_EC.lower(), "mhccaqeeiaz2x9o8pqwerty", "private-key"),
    ("pgp", PGP_BLOCK, "lQOYBGRkZGRkZGRk", "private-key"),
    ("ssh2", SSH2, "P2/56wAAAi4AAAA3aWYtbW9kbn", "private-key"),
    ("putty", PUTTY, "AAAAgQCyZGRkZGRkZGRkZGRk", "private-key"),
    (
        "openssh_body_only",
        "key: b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ",
        "AAAABG5vbmUAAAAEbm9uZQ",
        "private-key",
    ),
    (
        "age",
        "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ",
        "QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ",
        "age-secret-key",
    ),
    ("password_short", "password=Zq7wX", "Zq7wX", "secret-assignment"),
    ("token_short_colon", "token: Wx9Vq", "Wx9Vq", "secret-assignment"),
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


ORDINARY = [
    "claude-opus-4-1",
    "claude-sonnet-4-5",
    "anthropic.claude-opus-4-1-v1:0",
    "glm-5.3",
    "glm-*",
    "acme/widgets",
    "hydraflow/asia-pacific-region",
    "akia/widgets",
    "hydraflow-reviewers-on-zai",
    "anthropic-primary",
    "zai-harness",
    "task-0123456789abcdefghij-runner",
    "desk-9a8b7c6d5e4f3a2b1c0d",
    "sk-learn-pipeline-configuration",
    "max_tokens: 4096",
    "token_budget=12",
    "secrets are resolved by the vault",
    "the bearer of this decision",
    "see https://example.com/docs?x=1 and git@github.com:acme/widgets.git",
    "ssh://git@github.com/acme/widgets",
    "sha256:" + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "npm_config_cache",
    "glpat",
    "eyJ-only-a-prefix",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG public key",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_routing_text_is_not_redacted(text: str) -> None:
    assert redact(text) == text
    assert redact({"note": [text]}) == {"note": [text]}


def test_the_shipped_examples_are_unchanged_by_redaction() -> None:
    examples = Path(__file__).resolve().parent.parent / "rensei_routing" / "examples"
    documents = [json.loads((examples / n).read_text()) for n in ("policies.json", "context.json")]
    documents += [
        json.loads(line) for line in (examples / "contexts.jsonl").read_text().split("\n") if line
    ]
    assert len(documents) > 3
    for doc in documents:
        assert redact(doc) is doc  # not even rebuilt
    snapshot = PolicySnapshot.from_dict(documents[0])
    for ctx in documents[1:]:
        decision = explain(RouteContext.from_dict(ctx), snapshot, trace="full")
        text = decision.canonical().decode()
        assert not DEFAULT_REDACTOR.might_match(text)  # the append path's pre-check skips them
        assert redact(decision.to_dict()) == decision.to_dict()


def test_authorization_keeps_its_scheme_and_is_idempotent() -> None:
    once = redact("Authorization: Bearer abc.DEF_123")
    assert once == "Authorization: Bearer [REDACTED:authorization]"
    assert redact(once) == once
    assert redact("Authorization: Bearer") == "Authorization: Bearer"


def test_url_credential_keeps_the_rest_of_the_url() -> None:
    assert redact("https://deploy:p4ss@git.example.com/x.git") == (
        "https://deploy:[REDACTED:url-credential]@git.example.com/x.git"
    )
    once = redact("https://ghp_" + "A1" * 12 + ":x-oauth@github.com")
    assert "ghp_" not in once and "x-oauth" not in once and redact(once) == once


def test_a_redactor_is_built_from_any_pattern_list() -> None:
    """The construction API a plugin hook will feed: patterns are data."""
    ticket = RedactionPattern("acme-ticket", re.compile(r"ACME-[0-9]{6}", re.ASCII), ("acme-",))
    redactor = Redactor((*DEFAULT_PATTERNS, ticket))
    assert "acme-" in (redactor.triggers or ())
    assert redactor.redact({"a": "ACME-123456 xapp-1-A1-22-abcdef0123"}) == {
        "a": "[REDACTED:acme-ticket] [REDACTED:slack-token]"
    }


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
    "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----",
    "PuTTY-User-Key-File-2: ",
    "Private-MAC: ",
    "b3BlbnNzaC1rZXktdjE",
    "AGE-SECRET-KEY-1",
    "xapp-",
    "hooks.slack.com/services/",
    "://",
    "https://",
    "@",
    "Authorization: ",
    "Bearer ",
    "basic ",
    "eyJ",
    ".eyJ",
    ".",
    "glpat-",
    "AIza",
    "npm_",
    "akia",
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


@settings(max_examples=300)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(sorted(DEFAULT_REDACTOR.triggers or ())),
            st.text(
                alphabet="abcdeghkmnoprstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-/.:",
                max_size=40,
            ),
        ),
        max_size=6,
    ),
    st.booleans(),
)
def test_the_pre_check_is_a_trigger_search_at_every_length(pieces: list[str], upper: bool) -> None:
    # Short texts are searched with one alternation, long ones with the per-letter gates: both
    # must say exactly whether some trigger occurs (case-insensitively).
    text = "".join(pieces)
    text = text.upper() if upper else text
    for candidate in (text, text * 20):
        want = any(t in candidate.lower() for t in DEFAULT_REDACTOR.triggers or ())
        assert DEFAULT_REDACTOR.might_match(candidate) is want

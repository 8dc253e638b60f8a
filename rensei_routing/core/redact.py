"""Redaction of credential-shaped substrings inside JSON values. Pure: no I/O, no clock, no state.

A match is replaced by ``[REDACTED:<label>]``. Patterns are data: a tuple of
:class:`RedactionPattern` (label, compiled regex, optional literal triggers), so a plugin hook
can add to :data:`DEFAULT_PATTERNS` without touching this module.

What is redacted:

* every *string value* anywhere in the value (nested dicts and lists), by every pattern;
* every string leaf under a dict key that names a secret (``password``, ``client_secret``,
  ``apiKey``, ``github_token``, ...; see :data:`SECRET_KEY_PATTERN`), wholesale, with the label
  ``secret-field``: ``{"password": "hunter2"}`` is the structured form of ``password = '...'``.

What is not: dict *keys* are left as they are (they are the payload's schema; rewriting them
could merge two keys into one), and numbers, booleans and null are never changed.

Guarantees (tested, including by hypothesis):

* idempotent: ``redact(redact(v)) == redact(v)``;
* no pattern matches anywhere in the output: a marker never matches a pattern (every pattern
  refuses a value that starts with ``[REDACTED:``, and markers contain no token alphabet run),
  and the patterns are re-applied until nothing changes, so a replacement cannot expose a new
  match next to it.

Case: values are normalised before they are recorded (a context's repo is lowercased), so a
pattern whose credential survives case folding recognisably (AWS key ids, PEM armour, Google
keys, JWTs, URL and header credentials) matches in any case: an id that ``.upper()`` restores
is still redacted. Such patterns use ``re.ASCII | re.IGNORECASE``.

Speed: each pattern may list lowercase literal *triggers*, substrings at least one of which
every match contains (compared against the lowercased text). A string containing no trigger is
returned untouched without running any regex, so the common case (no credential) costs a few
substring searches. A pattern without triggers always runs. The pre-check scans the text once
per distinct first character of the triggers, so a trigger is best chosen to start with a
character that is rare in routing data (``@``, ``.``) or that another trigger already starts
with (any substring every match contains will do: ``arer`` for ``bearer``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import ConfigurationError

__all__ = [
    "DEFAULT_PATTERNS",
    "DEFAULT_REDACTOR",
    "MARKER_PREFIX",
    "SECRET_KEY_PATTERN",
    "RedactionPattern",
    "Redactor",
    "marker",
    "redact",
]

MARKER_PREFIX: Final = "[REDACTED:"
_LABEL = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_MAX_ROUNDS: Final = 16
_NOT_MARKER = r"(?!\[REDACTED:)"


def marker(label: str) -> str:
    """The replacement text for a match of ``label``: ``[REDACTED:<label>]``."""
    return f"{MARKER_PREFIX}{label}]"


@dataclass(frozen=True, slots=True)
class RedactionPattern:
    """One credential shape: a label, a regex, and literal triggers for the cheap pre-check.

    If the regex has a group named ``secret`` only that group is replaced (so
    ``password = 'x'`` keeps its name); otherwise the whole match is.

    Raises:
        ConfigurationError: the label is not ``[a-z0-9-]``, a trigger is not lowercase
            printable ASCII without quotes or backslashes, or a case-insensitive regex with
            triggers lacks ``re.ASCII`` (Unicode case folding could match text whose lowercase
            has no trigger).
    """

    label: str
    regex: re.Pattern[str]
    triggers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _LABEL.fullmatch(self.label):
            raise ConfigurationError(f"redaction label {self.label!r} must match {_LABEL.pattern}")
        for t in self.triggers:
            plain = t.isascii() and t.isprintable() and t == t.lower()
            if not t or not plain or '"' in t or "\\" in t:
                raise ConfigurationError(
                    f"redaction trigger {t!r} must be non-empty lowercase ASCII"
                )
        folds = self.regex.flags & re.IGNORECASE or "(?i" in self.regex.pattern
        if self.triggers and folds and not self.regex.flags & re.ASCII:
            raise ConfigurationError(
                f"case-insensitive {self.label!r} with triggers needs re.ASCII"
            )

    def replace(self, text: str) -> str:
        """Replace every match in ``text`` by this pattern's marker."""
        if "secret" in self.regex.groupindex:
            mark = marker(self.label)

            def _sub(m: re.Match[str]) -> str:
                base = m.start()
                whole = m.group(0)
                return whole[: m.start("secret") - base] + mark + whole[m.end("secret") - base :]

            return self.regex.sub(_sub, text)
        return self.regex.sub(marker(self.label), text)


_A = re.ASCII
_AI = re.ASCII | re.IGNORECASE
_SECRET_WORD = r"(?:secret|password|passwd|token|api[_-]?key)"
#: Armour lines of a private key: PEM (``-----BEGIN RSA PRIVATE KEY-----``, OpenSSH, PKCS#8,
#: encrypted, PGP ``PRIVATE KEY BLOCK``) and SSH2/SECSH (``---- BEGIN SSH2 ENCRYPTED PRIVATE KEY
#: ----``), in any case (a lowercased key is still a key).
_ARMOUR = r"-{4,5} ?%s [A-Z0-9 ]*?PRIVATE KEY(?: BLOCK)? ?-{4,5}"
_TOKEN_END = r"(?![A-Za-z0-9_-])"

#: The built-in credential shapes, in the order they are applied. Patterns for credentials whose
#: alphabet survives case folding (AWS key ids, PEM armour, Google keys, JWTs, ...) match in any
#: case: a context's repo is lowercased before it is ever recorded, and an id that
#: ``.upper()`` restores must not pass.
DEFAULT_PATTERNS: Final[tuple[RedactionPattern, ...]] = (
    RedactionPattern(
        "private-key",
        re.compile(
            (_ARMOUR % "BEGIN") + r"(?:[\s\S]*?" + (_ARMOUR % "END") + r"|[\s\S]*)",
            _AI,
        ),
        ("key",),  # in every match ("private key"); shares the gate of secret-assignment
    ),
    RedactionPattern(
        "private-key",
        re.compile(
            r"PuTTY-User-Key-File-[0-9]+:(?:[\s\S]*?Private-MAC:[ \t]*[0-9a-f]+|[\s\S]*)", _AI
        ),
        ("key",),
    ),
    RedactionPattern(
        # the base64 body of an OpenSSH private key ("openssh-key-v1\0"), armour or not
        "private-key",
        re.compile(r"b3BlbnNzaC1rZXktdjE[A-Za-z0-9+/=\r\n]*", _AI),
        ("ktdje",),  # "...zxktdje" ends every match: a 'k' gate, which exists anyway
    ),
    RedactionPattern(
        "age-secret-key",
        re.compile(r"AGE-SECRET-KEY-1[0-9A-Z]{50,}", _AI),
        ("secret",),
    ),
    RedactionPattern(
        "github-token",
        re.compile(r"(?<![A-Za-z0-9])(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{20,}", _A),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    RedactionPattern(
        "github-pat",
        re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}", _A),
        ("github_pat_",),
    ),
    RedactionPattern(
        "gitlab-token",
        re.compile(
            r"(?<![A-Za-z0-9_-])gl(?:pat|dt|rt|ptt|ft|soat|cbt|imt|agent)-[A-Za-z0-9_-]{20,}", _A
        ),
        ("glpat-", "gldt-", "glrt-", "glptt-", "glft-", "glsoat-", "glcbt-", "glimt-", "glagent-"),
    ),
    RedactionPattern(
        "aws-access-key-id",
        re.compile(
            r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])",
            _AI,
        ),
        ("akia", "asia", "abia", "acca"),
    ),
    RedactionPattern(
        "aws-secret-access-key",
        re.compile(
            r"aws[A-Za-z0-9_.-]{0,20}?secret[A-Za-z0-9_.-]{0,20}[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?P<secret>" + _NOT_MARKER + r"[A-Za-z0-9/+=]{16,})",
            _AI,
        ),
        ("secret",),
    ),
    RedactionPattern(
        "google-api-key",
        re.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}" + _TOKEN_END, _AI),
        ("aiza",),
    ),
    RedactionPattern(
        "slack-token",
        re.compile(r"(?<![A-Za-z0-9])(?:xox[a-z]|xapp)-[A-Za-z0-9-]{10,}", _A),
        ("xox", "xapp-"),
    ),
    RedactionPattern(
        "slack-webhook",
        re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9/_-]+", _AI),
        ("slack.com/",),
    ),
    RedactionPattern(
        "npm-token",
        re.compile(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])", _A),
        ("pm_",),
    ),
    RedactionPattern(
        "jwt",
        re.compile(
            r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]+)*",
            _AI,
        ),
        (".eyj",),  # the payload part: '.' is rare in routing data, 'e' the commonest letter
    ),
    RedactionPattern(
        "anthropic-api-key",
        re.compile(r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,}", _A),
        ("sk-",),
    ),
    RedactionPattern(
        "sk-api-key",
        re.compile(r"(?<![A-Za-z0-9_-])sk-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}", _A),
        ("sk-",),
    ),
    RedactionPattern(
        # the password of ``scheme://user:password@host`` (the user name may be a marker)
        "url-credential",
        re.compile(
            r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,31}://"
            r"(?:\[REDACTED:[a-z0-9-]+\]|[^\s/?#@:\[\]\"'])*:"
            r"(?P<secret>" + _NOT_MARKER + r"[^\s/?#@\"']+)@",
            _AI,
        ),
        ("@",),  # ':' fills JSON text; '@' is rare
    ),
    RedactionPattern(
        # ``Authorization: Bearer <token>``, any scheme (or none); the scheme word is kept
        "authorization",
        re.compile(
            r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?:(?:bearer|basic|digest|token|negotiate|apikey|aws4-hmac-sha256)"
            r"(?![^\s\"'])[ \t]*)?+"
            r"(?P<secret>" + _NOT_MARKER + r"[^\s\"']+)",
            _AI,
        ),
        ("authorization",),
    ),
    RedactionPattern(
        "bearer-token",
        re.compile(
            r"(?<![A-Za-z0-9])bearer[ \t]+(?P<secret>" + _NOT_MARKER + r"[A-Za-z0-9._~+/-]{16,}=*)",
            _AI,
        ),
        ("arer",),  # rides the 'a' gate
    ),
    RedactionPattern(
        "secret-assignment",
        re.compile(
            _SECRET_WORD + r"[A-Za-z0-9_.-]{0,32}[\"']?[ \t]*[:=][ \t]*(?P<q>[\"'])"
            r"(?P<secret>" + _NOT_MARKER + r"[^\"'\r\n]+)(?P=q)",
            _AI,
        ),
        ("secret", "passw", "token", "key"),
    ),
    RedactionPattern(
        # unquoted, any length: ``password=x`` is as much a leak as a long one
        "secret-assignment",
        re.compile(
            _SECRET_WORD + r"[ \t]*[:=][ \t]*(?P<secret>" + _NOT_MARKER + r"[^\s\"',;&]+)",
            _AI,
        ),
        ("secret", "passw", "token", "key"),
    ),
)

#: A dict key naming a secret, matched against the key with camelCase split into ``_`` words and
#: lowercased: ``password``, ``db_password``, ``clientSecret``, ``api-key``, ``githubToken``, ...
SECRET_KEY_PATTERN: Final = re.compile(
    r"(?:^|[^a-z0-9])(?:secrets?|password|passwd|token|api[^a-z0-9]?key|apikey|private[^a-z0-9]?key"
    r"|access[^a-z0-9]?key|credentials?)$",
    _A,
)
_SECRET_KEY_TRIGGERS: Final = ("secret", "passw", "token", "key", "credential")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
SECRET_FIELD_LABEL: Final = "secret-field"


#: Up to this length, :meth:`Redactor.might_match` searches one alternation of every trigger
#: (3.5x faster on a 16-character id); beyond it, the per-first-character gates (6x faster on
#: 2 KB of JSON).
_SHORT_TEXT: Final = 64


@dataclass(frozen=True, slots=True)
class Redactor:
    """Patterns compiled for repeated use; immutable. ``Redactor()`` uses the defaults.

    ``secret_keys`` (``None`` to disable) selects the dict keys whose string leaves are
    redacted wholesale.
    """

    patterns: tuple[RedactionPattern, ...] = DEFAULT_PATTERNS
    secret_keys: re.Pattern[str] | None = SECRET_KEY_PATTERN
    #: Patterns from this index on (the plugins') apply jointly: each matches the same text
    #: and the union of their matches is replaced, so no pattern can hide another's match by
    #: redacting part of it first. ``None``: every pattern applies in turn (the built-ins'
    #: order, as HydraFlow's redactor does).
    joint_from: int | None = None
    #: Every trigger, or ``None`` when some pattern has none (the pre-check can never skip).
    triggers: tuple[str, ...] | None = field(init=False, repr=False, compare=False)
    #: The triggers as a few literal alternations, one per first character: ``re`` factors the
    #: shared prefix out and scans for it, far cheaper than one substring search per trigger.
    gates: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    #: Every trigger in one alternation: one search beats a search per gate on a short text
    #: (an id, a name), where the gates' prefix scans have nothing to skip.
    gate: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        out: list[str] | None = list(_SECRET_KEY_TRIGGERS) if self.secret_keys is not None else []
        for p in self.patterns:
            if not p.triggers:
                out = None
                break
            assert out is not None
            out.extend(p.triggers)
        triggers = None if out is None else tuple(sorted(set(out)))
        gates: list[re.Pattern[str]] = []
        for first in sorted({t[0] for t in triggers or ()}):
            group = sorted(t for t in triggers or () if t[0] == first)
            gates.append(re.compile("|".join(re.escape(t) for t in group)))
        object.__setattr__(self, "triggers", triggers)
        object.__setattr__(self, "gates", tuple(gates))
        one = None if not triggers else re.compile("|".join(re.escape(t) for t in triggers))
        object.__setattr__(self, "gate", one)

    def might_match(self, text: str) -> bool:
        """Cheap pre-check: ``False`` means no pattern and no secret key can match in ``text``.

        ``text`` may be any text containing every string and key of a value (its JSON form, for
        instance): triggers contain no character that JSON escapes.
        """
        if self.triggers is None:
            return True
        low = text.lower()
        if len(low) <= _SHORT_TEXT and self.gate is not None:
            return self.gate.search(low) is not None
        return any(gate.search(low) is not None for gate in self.gates)

    def redact_text(self, text: str) -> str:
        """Redact one string: every pattern (those before ``joint_from`` in turn, the rest
        jointly), repeated until nothing changes."""
        low = text.lower()
        active = [p for p in self.patterns if not p.triggers or any(t in low for t in p.triggers)]
        if not active:
            return text
        if self.joint_from is not None:
            return self._redact_joint(text, self.joint_from)
        for _ in range(_MAX_ROUNDS):
            before = text
            for p in active:
                text = p.replace(text)
            if text == before:
                break
            active = list(self.patterns)
        return text

    def _redact_joint(self, text: str, cut: int) -> str:
        """:meth:`redact_text` with the patterns from index ``cut`` on applied jointly."""
        low = text.lower()
        patterns = self.patterns
        active = [
            i for i, p in enumerate(patterns) if not p.triggers or any(t in low for t in p.triggers)
        ]
        for _ in range(_MAX_ROUNDS):
            before = text
            for i in active:
                if i < cut:
                    text = patterns[i].replace(text)
            together = [patterns[i] for i in active if i >= cut]
            if together:
                text = _replace_jointly(together, text)
            if text == before:
                break
            active = list(range(len(patterns)))
        return text

    def is_secret_key(self, key: str) -> bool:
        """Whether the dict key ``key`` names a secret (its string leaves are redacted)."""
        if self.secret_keys is None:
            return False
        return self.secret_keys.search(_CAMEL.sub(r"\1_\2", key).lower()) is not None

    def redact(self, value: Any) -> Any:
        """Return ``value`` with every credential-shaped substring replaced by its marker.

        When nothing can match, ``value`` itself is returned; otherwise containers are rebuilt
        (dicts stay dicts, lists lists, tuples tuples) and the input is never modified. Values
        that are neither strings nor containers are returned as they are.
        """
        if self.triggers is not None:
            texts: list[str] = []
            _collect(value, texts)
            if not self.might_match("\n".join(texts)):
                return value
        return self._walk(value, False)

    def _walk(self, value: Any, under_secret: bool) -> Any:
        if isinstance(value, str):
            if under_secret and value and not _is_marker(value):
                return marker(SECRET_FIELD_LABEL)
            return self.redact_text(value)
        if isinstance(value, Mapping):
            return {
                k: self._walk(v, under_secret or (isinstance(k, str) and self.is_secret_key(k)))
                for k, v in value.items()
            }
        if isinstance(value, list):
            return [self._walk(v, under_secret) for v in value]
        if isinstance(value, tuple):
            return tuple(self._walk(v, under_secret) for v in value)
        return value


def _replace_jointly(patterns: Sequence[RedactionPattern], text: str) -> str:
    """Replace the union of every pattern's matches in ``text`` (each pattern matched on the
    same text; overlapping matches become one marker, labelled by the one starting first)."""
    spans: list[tuple[int, int, int, str]] = []
    for order, p in enumerate(patterns):
        secret = "secret" in p.regex.groupindex
        for m in p.regex.finditer(text):
            start, end = m.span("secret") if secret and m.start("secret") >= 0 else m.span()
            spans.append((start, -end, order, p.label))
    if not spans:
        return text
    spans.sort()
    merged: list[list[Any]] = []
    for start, neg_end, _, label in spans:
        end = -neg_end
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end, label])
    out: list[str] = []
    at = 0
    for start, end, label in merged:
        out.append(text[at:start])
        out.append(marker(label))
        at = end
    out.append(text[at:])
    return "".join(out)


def _collect(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str):
                out.append(k)
            _collect(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _collect(v, out)


def _is_marker(text: str) -> bool:
    if not (text.startswith(MARKER_PREFIX) and text.endswith("]")):
        return False
    return _LABEL.fullmatch(text[len(MARKER_PREFIX) : -1]) is not None


DEFAULT_REDACTOR: Final = Redactor()


def redact(value: Any, patterns: Iterable[RedactionPattern] = DEFAULT_PATTERNS) -> Any:
    """Redact credential-shaped substrings in a JSON value (see the module docstring).

    Raises:
        Nothing: every JSON value has a redacted form.
    """
    pats = tuple(patterns)
    redactor = DEFAULT_REDACTOR if pats == DEFAULT_PATTERNS else Redactor(pats)
    return redactor.redact(value)

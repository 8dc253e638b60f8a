"""The exception tree: one base, one branch per area. Imports nothing internal.

Every error this package raises on purpose derives from :class:`RenseiRoutingError`, so an
edge (the CLI, a host daemon) can catch exactly ours and let a genuine bug keep its traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class RenseiRoutingError(Exception):
    """Base for every error this package raises on purpose."""


# -- configuration ------------------------------------------------------------------------------


class ConfigurationError(RenseiRoutingError):
    """A vocabulary, redaction pattern or plugin contribution is inconsistent."""


# -- input --------------------------------------------------------------------------------------


class InputError(RenseiRoutingError):
    """Input could not be read as the value it claims to be."""


class MalformedError(InputError):
    """A document is not a well-formed value: unknown field, wrong type, value out of range.

    ``path`` names the offending field, e.g. ``policies[3].match.roles[0]``.
    """

    def __init__(self, path: str, message: str) -> None:
        self.path = path or "$"
        self.message = message
        super().__init__(f"{self.path}: {message}")


class CanonicalEncodingError(InputError):
    """A value cannot be written as RFC 8785 canonical JSON (e.g. NaN, an unsafe integer)."""


# -- policy -------------------------------------------------------------------------------------


class PolicyError(RenseiRoutingError):
    """A policy set is unacceptable."""


class PolicyValidationError(PolicyError):
    """A policy set failed validation; ``issues`` lists every problem found, not just the first."""

    def __init__(self, issues: Sequence[Any], *, omitted: int = 0) -> None:
        self.issues = tuple(issues)
        #: Issues found but not listed (validation caps its report; see ``validate``).
        self.omitted = omitted
        lines = [f"{i.code} [{i.policy_id or '-'}]: {i.detail}" for i in self.issues]
        if omitted:
            lines.append(f"... and {omitted} more not listed")
        total = len(self.issues) + omitted
        super().__init__(f"{total} validation issue(s):\n  " + "\n  ".join(lines))


# -- store --------------------------------------------------------------------------------------


class StoreError(RenseiRoutingError):
    """The SQLite store failed or is inconsistent."""


class SchemaVersionError(StoreError):
    """The database was written by a newer schema, or is not a rensei-routing database."""


class CorruptSnapshotError(StoreError):
    """The current policy revision is corrupt; writing over it waits for an operator's repair."""


class RevisionLimitError(StoreError):
    """The next policy revision number would exceed 2**53 - 1 (what JSON readers carry exactly)."""


class NotFoundError(StoreError):
    """A requested row (revision, record, key) does not exist."""


class HomeError(StoreError):
    """The home directory is missing, not initialised, or unusable."""


# -- audit --------------------------------------------------------------------------------------


class AuditError(RenseiRoutingError):
    """The audit log or one of its checkpoints is unusable."""


class CheckpointFormatError(AuditError):
    """A checkpoint note could not be parsed."""


# -- signing ------------------------------------------------------------------------------------


class SignatureError(RenseiRoutingError):
    """Signing or key handling failed."""


class KeyFormatError(SignatureError):
    """A key file or key string is not a valid Ed25519 key."""


class VerificationError(SignatureError):
    """A signature did not verify."""

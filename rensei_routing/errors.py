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

    ``path`` names the offending field, e.g. ``policies[3].match.roles[0]``; ``keys``, when
    the core's readers raised it, are the same path as keys (``("match", "roles", 0)``)
    below the string the reader was given as its root, so a caller can find the field.
    """

    def __init__(self, path: str, message: str, *, keys: tuple[str | int, ...] = ()) -> None:
        self.path = path or "$"
        self.message = message
        self.keys = keys
        super().__init__(f"{self.path}: {message}")


class OutputError(RenseiRoutingError):
    """Output could not be written (a closed pipe, a full device): the work it reports is moot."""


class CanonicalEncodingError(InputError):
    """A value cannot be written as RFC 8785 canonical JSON (e.g. NaN, an unsafe integer)."""


# -- policy -------------------------------------------------------------------------------------


class PolicyError(RenseiRoutingError):
    """A policy set is unacceptable."""


class PolicyStoreCorruptError(PolicyError):
    """A foreign policy store (HydraFlow's ``policies.json``) is ``corrupt``: unparseable, a
    field of the wrong type, or a content hash that does not match its policies."""


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


class PolicyWriteError(PolicyError):
    """A policy save or rollback was refused before anything was written; ``code`` names why."""

    code = "policy-write-refused"

    def __init__(self, message: str) -> None:
        super().__init__(f"{self.code}: {message}")


class StaleRevisionError(PolicyWriteError):
    """The save expected another current revision than the one that won; never retried."""

    code = "stale-revision"

    def __init__(self, expected: int, current: int) -> None:
        self.expected = expected
        self.current = current
        super().__init__(
            f"expected revision {expected}, but revision {current} is current (it won); "
            "nothing was saved: look at it, then save again against it"
        )


class OutOfScopeError(PolicyWriteError):
    """A scoped edit would add or change a policy outside its repository's slice."""

    code = "out-of-scope"

    def __init__(self, policy_id: str, scope: str, why: str) -> None:
        self.policy_id = policy_id
        self.scope = scope
        super().__init__(
            f"policy {policy_id!r} {why}, outside the slice of {scope}; nothing was saved"
        )


class CredentialValueError(PolicyWriteError):
    """A new or changed policy (or the actor) holds a credential-shaped value."""

    code = "credential-shaped-value"

    def __init__(self, subject: str, label: str) -> None:
        self.subject = subject
        self.label = label
        super().__init__(f"{subject} holds a value shaped like a {label}; nothing was saved")


class RollbackTargetError(PolicyWriteError):
    """A rollback's target revision never existed, or does not load (``reason``)."""

    code = "rollback-target"

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        self.code = reason
        super().__init__(message)


class MatrixError(PolicyError):
    """A route matrix (or a blast radius) cannot be built as asked."""


class MatrixAxisError(MatrixError):
    """A matrix axis names what is not there: a repository id that is not ``owner/name``, or a
    role, request face, requirement or repo class the vocabulary does not know."""


class MatrixTooLargeError(MatrixError):
    """A matrix would hold more cells than its bound; narrow its axes."""


# -- enforcement --------------------------------------------------------------------------------


class EnforcementError(RenseiRoutingError):
    """An enforcement command (arm, disarm, gate) was refused; ``code`` names why, and nothing
    was written unless the refusal says its gate verdict was recorded."""

    code = "enforcement-refused"

    def __init__(self, code: str, message: str, *, verdict_seq: int | None = None) -> None:
        self.code = code
        #: The seq of the gate verdict appended before the arm was refused, if any.
        self.verdict_seq = verdict_seq
        super().__init__(f"{code}: {message}")


class EnforcementRefused(RenseiRoutingError):
    """An armed canary refused a spawn (``code``: ``held``, ``rejected`` or ``tripped``) before
    the caller obtained any credential; ``decision_id`` and ``seq`` name the audit record of
    the refusal, committed before this was raised."""

    def __init__(self, code: str, message: str, *, decision_id: str, seq: int) -> None:
        self.code = code
        self.decision_id = decision_id
        self.seq = seq
        super().__init__(f"{code}: {message}")


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


class BusyTimeoutError(StoreError):
    """Another connection held a lock on the database for longer than the busy timeout."""


class DiskFullError(StoreError):
    """The disk holding the home (or the database's size limit) is full; nothing was written."""


class DatabaseUnreachableError(StoreError):
    """The control database (PostgreSQL) cannot be reached, or the connection was lost; the
    transaction in flight, if any, was not committed."""


class DriverMissingError(StoreError):
    """The configured database needs a driver that is not installed (psycopg for PostgreSQL)."""


class BackupError(StoreError):
    """A backup or restore was refused, failed, or its copy did not verify (nothing replaced)."""


# -- audit --------------------------------------------------------------------------------------


class AuditError(RenseiRoutingError):
    """The audit log or one of its checkpoints is unusable."""


class ArchiveFormatError(AuditError):
    """An exported audit file (JSON Lines) is unreadable or not in the export format."""


class EvidenceError(AuditError):
    """A checkpoint, proof or cosignature was refused; ``verdict`` is the stable code of why."""

    def __init__(self, verdict: str, message: str) -> None:
        super().__init__(message)
        self.verdict = verdict


class EvidenceFormatError(EvidenceError):
    """A proof, add-checkpoint body, cosignature or verifier key is malformed (``malformed``)."""

    def __init__(self, message: str) -> None:
        super().__init__("malformed", message)


class CheckpointFormatError(EvidenceFormatError):
    """A checkpoint note could not be parsed."""


class CheckpointRejectedError(EvidenceError):
    """A checkpoint does not satisfy a trust policy: ``verdict`` is ``other-origin``,
    ``wrong-key``, ``bad-signature`` or ``quorum-not-met``."""


class HydraflowChainError(AuditError):
    """A HydraFlow audit chain does not verify by HydraFlow's rule: ``seq`` is the first bad
    position, ``reason`` the code (``unparseable-line``, ``seq-gap``, ...)."""

    def __init__(self, seq: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.seq = seq
        self.reason = reason


class ImportRefusedError(AuditError):
    """A verified foreign chain (or policy store) cannot be imported: a fork of what was
    imported before, a record we cannot store, a corrupt store. Nothing was written."""


class PartialRecordError(AuditError):
    """A batch failed after earlier batches were committed (the message says what was kept)."""


class TreeError(AuditError):
    """The audit log's Merkle tree storage is missing hashes or holds malformed ones."""


class ProofError(EvidenceError):
    """An inclusion or consistency proof does not hold: ``verdict`` is the stable outcome
    (``inclusion-failed``, ``inconsistent``), ``reason`` the stable cause (``root-mismatch``,
    ``wrong-proof-length``, ...)."""

    def __init__(self, verdict: str, reason: str, message: str) -> None:
        super().__init__(verdict, f"{verdict} ({reason}): {message}")
        self.reason = reason


class TraceUnavailableError(AuditError):
    """A recorded decision's full trace cannot be re-derived (the message says why: no decision,
    the revision it cites is absent or changed, or the replayed decision differs)."""


class SegmentError(AuditError):
    """A rotation or a prune of the audit log's segments was refused or could not complete
    (the message says why; the layout is the old one: nothing was sealed, moved or deleted)."""


# -- ruleset snapshots ---------------------------------------------------------------------------


class SnapshotError(RenseiRoutingError):
    """A ruleset snapshot cannot be compiled, trusted, cached or served."""


class SnapshotFormatError(SnapshotError):
    """The bytes are not a well-formed snapshot envelope (or a value cannot be published)."""


class SnapshotVerificationError(SnapshotError):
    """A snapshot failed a trust check; ``reason`` is its code (``algorithm``, ``ruleset-rev``,
    ``content-hash``, ``unknown-key``, ``signature``, ``compiled-at``)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {message}")


class SnapshotValidationError(SnapshotError):
    """A compile failed validation and was not published; ``failed`` names every failing
    validator with its problems."""

    def __init__(self, failed: Sequence[Any]) -> None:
        self.failed = tuple(failed)
        parts = [
            f"{r.name}: {'; '.join(r.problems) if r.problems else r.error}" for r in self.failed
        ]
        super().__init__("snapshot not published, validator(s) failed: " + " | ".join(parts))


class RollbackError(SnapshotError):
    """A snapshot older than the held one, or the held revision with another hash."""


#: What :class:`ExpiredError` says renews a snapshot: a fetch from the configured source.
RENEW_HINT = (
    "; renew it with `rensei host sync` (from `rensei serve`, which re-signs it every 2 "
    "minutes, or from the file of a new `rensei snapshot compile` and `snapshot export`), or "
    "keep `rensei host run` polling"
)


class ExpiredError(SnapshotError):
    """The cached snapshot is older than ``RefuseAfter``: refused, loudly, never guessed at;
    the message names the command that renews it (:data:`RENEW_HINT`)."""

    def __init__(
        self, ruleset_rev: str, age_ms: int, refuse_after_ms: int, *, ages: tuple[str, str]
    ) -> None:
        """``ages``: the age and the bound as text, in the one human form (``13m52s``) of
        :func:`rensei_routing.core.timestamps.format_age` (a leaf cannot import it)."""
        self.ruleset_rev = ruleset_rev
        self.age_ms = age_ms
        self.refuse_after_ms = refuse_after_ms
        age, bound = ages
        super().__init__(
            f"ruleset snapshot {ruleset_rev} is {age} old, past RefuseAfter "
            f"({bound}): refusing to decide from it" + RENEW_HINT
        )


class ReceiptError(SnapshotError):
    """An admission receipt or a session under one was refused; ``reason`` names why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class FetchError(SnapshotError):
    """A snapshot could not be fetched (unreachable, timed out, refused, too large)."""


class FutureSnapshotError(SnapshotError):
    """A snapshot's ``compiledAt`` is later than now by more than the allowed clock skew."""


class DamagedCacheError(SnapshotError):
    """The host's cached copy is damaged: it no longer verifies (edited, truncated, its key
    untrusted) or is oversized. The next valid sync sets it aside and adopts the new one."""


# -- plugins ------------------------------------------------------------------------------------


class PluginError(RenseiRoutingError):
    """A plugin misbehaved or was misregistered (the message names the plugin)."""


class UnknownSeamError(PluginError):
    """No seam of that name is registered."""


class ClassifierError(PluginError):
    """A seam's legacy-mechanism classifier raised or returned the wrong type."""


class RouteNotAppliedError(PluginError):
    """An enforced route reached a seam whose plugin applies none: the spawn must not run."""


class SeamRequestError(InputError):
    """A seam's request is not the shape its seam takes an enforced route on (argv, mapping)."""


# -- signing ------------------------------------------------------------------------------------


class SignatureError(RenseiRoutingError):
    """Signing or key handling failed."""


class KeyFormatError(SignatureError):
    """A key file or key string is not a valid Ed25519 key."""


class VerificationError(SignatureError):
    """A signature did not verify."""


# -- fleet evidence (PostgreSQL) ------------------------------------------------------------------


class FleetError(RenseiRoutingError):
    """The fleet evidence store (PostgreSQL) refused or failed an ingest, a trust, a repair or a
    report."""


class FleetStoreError(FleetError):
    """The fleet database is unreachable, not a fleet database, or failed a statement (the
    message names the database, never its password); nothing was written."""


class FleetIngestRefusedError(FleetError):
    """An export was refused before a line of it was loaded: no checkpoint, a checkpoint no
    trusted host key signed, a chain that does not verify against it, a gap. ``seq`` is the
    first bad seq when there is one."""

    def __init__(self, message: str, *, host_id: str | None = None, seq: int | None = None):
        super().__init__(message)
        self.host_id = host_id
        self.seq = seq


class FleetForkError(FleetIngestRefusedError):
    """A host's export disagrees with the chain ingested from it before, at ``seq``: an alarm
    row names the host and the seq; nothing of the export was loaded."""


class FleetRepairError(FleetError):
    """A repair of a host's held copy was refused (the host is not trusted, the seq lies past
    the records held or inside a fork's disputed records, or the copy lacks the record before
    it); nothing was changed."""


class WitnessError(EvidenceError):
    """A transparency-log statement was refused: a witness would not cosign, a cosignature,
    proof or checkpoint does not hold. ``verdict`` is the stable name (docs/formats.md), and
    leads the message."""

    def __init__(self, verdict: str, message: str) -> None:
        super().__init__(verdict, f"{verdict}: {message}")


class WitnessRefusedError(WitnessError):
    """This home, as a witness, refused to cosign a checkpoint (backwards, another root at the
    same size, no or a failing consistency proof, another log key); its view is unchanged."""

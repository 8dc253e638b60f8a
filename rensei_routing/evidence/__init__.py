"""Transparency-log evidence as a service: the keys a verifier trusts and the witness policy
(:mod:`.policy`), this home as a witness of other logs (:mod:`.cosign`), and the proofs of this
home's own log: one record's inclusion, the consistency of two checkpoints, cosignatures kept
beside checkpoints (:mod:`.proofs`). Must not print or import the CLI."""

"""The pure core: four domains over the shared pieces.

``routing/`` (the resolver and its vocabulary), ``audit/`` (the hash chain and its checkpoints),
``snapshot/`` (the signed envelope, its ages and the decision-class postures), ``shadow/``
(legacy routes beside policy's, what-if, agreement). Shared: ``canonical`` (RFC 8785 bytes and
digests), ``_parse`` (strict readers for external data), ``redact`` (secret patterns, used by
routing's ids and the audit chain alike) and ``timestamps`` (RFC 3339 UTC text, checked and
written, for the chain's records and the snapshot envelope alike).

Nothing under ``core`` performs I/O, reads a clock or the environment, or holds global state;
nothing under it imports from outside it (the layering test, tests/test_layering.py).
"""

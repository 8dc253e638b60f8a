"""The audit chain's rules: record links and hashes, checkpoint notes, export archives.

Pure: the SQLite log that applies these rules is ``rensei_routing.store.audit``. Imports only
the shared core pieces.
"""

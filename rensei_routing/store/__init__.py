"""Adapters over SQLite (apsw): the database, the home directory, policy revisions, the audit log.

They import the pure core, never the other way round, and never read the clock.
"""

"""The control side's data on PostgreSQL (psycopg 3, the optional extra
``rensei-routing[postgres]``): :class:`PgControlStore` and its connections. psycopg is imported
on first use, never by importing this package, so the core install never needs it.
"""

from __future__ import annotations

from .connection import CHANNEL, connect, describe
from .control import PgControlStore

__all__ = ["CHANNEL", "PgControlStore", "connect", "describe"]

"""Routing: the vocabulary, contexts, policies and their validation, the precedence index, the
pure and total resolver (``explain``), decisions, their ids, and decision lines.

The domain every other one builds on: it imports only the shared core pieces, never ``audit``,
``snapshot`` or ``shadow``.
"""

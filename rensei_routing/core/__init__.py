"""The pure core: value types, precedence, validation, the resolver, canonical bytes.

Nothing under ``core`` performs I/O, reads a clock or the environment, or holds global state.
"""

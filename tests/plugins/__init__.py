"""Sample plugins for the tests (registered per test, never installed)."""

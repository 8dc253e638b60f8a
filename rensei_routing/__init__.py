"""rensei-routing: a pure, total routing resolver with a SQLite store and a hash-chained audit log."""

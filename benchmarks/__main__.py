"""``python -m benchmarks``: see :mod:`benchmarks.runner`."""

from .runner import main

raise SystemExit(main())

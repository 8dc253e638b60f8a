"""``python -m rensei_routing.cli``: the same as the ``rensei`` console script."""

from . import cli

cli()

"""Imports every subcommand module so each registers itself on the ``nmt`` group."""

from nmt_cli.cli import options  # noqa: F401
from nmt_cli.cli import prepare  # noqa: F401

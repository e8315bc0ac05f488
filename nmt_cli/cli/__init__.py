"""The ``nmt`` command: a Click group whose subcommands parse options and call the library.

Each subcommand lives in its own module here and registers itself on :data:`cli`.
Errors the user can fix (:class:`~nmt_cli.errors.NmtError`) print one line and exit 1.
"""

from __future__ import annotations

import sys

import click

from nmt_cli import __version__
from nmt_cli.errors import NmtError


class NmtGroup(click.Group):
    """Turns :class:`NmtError` into a one-line message and a non-zero exit."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except NmtError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(1)


@click.group(cls=NmtGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nmt")
def cli() -> None:
    """Neural machine translation: prepare, train, translate, evaluate, align."""


def _register_commands() -> None:
    from nmt_cli.cli import commands  # noqa: F401  (each module adds its command to `cli`)


def main(argv: list[str] | None = None) -> None:
    _register_commands()
    try:
        cli.main(args=argv, prog_name="nmt", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        click.echo("interrupted", err=True)
        sys.exit(130)


__all__ = ["cli", "main"]

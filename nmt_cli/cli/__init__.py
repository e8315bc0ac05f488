"""The ``nmt`` command: a Click group whose subcommands parse options and call the library.

Each subcommand lives in its own module here and registers itself on :data:`cli`; the
module is imported only when its command runs (see :data:`COMMAND_MODULES`), so
``nmt prepare`` never pays for importing torch. Errors the user can fix
(:class:`~nmt_cli.errors.NmtError`) print one line and exit 1.
"""

from __future__ import annotations

import importlib
import sys

import click

from nmt_cli import __version__
from nmt_cli.errors import NmtError


#: subcommand -> module of nmt_cli.cli that defines it
COMMAND_MODULES = {
    "prepare": "prepare",
    "train": "train",
    "average": "train",
    "plot": "train",
    "translate": "translate",
    "evaluate": "evaluate",
    "align": "align",
    "score": "score",
    "export": "export",
    "serve": "serve",
}


class NmtGroup(click.Group):
    """Loads subcommands lazily; turns :class:`NmtError` into one line and a non-zero exit."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMAND_MODULES:
            importlib.import_module(f"nmt_cli.cli.{COMMAND_MODULES[name]}")
        return self.commands.get(name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except NmtError as exc:
            for line in str(exc).splitlines():  # a config can have several problems: a line each
                click.echo(f"error: {line}", err=True)
            ctx.exit(1)


@click.group(cls=NmtGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nmt")
def cli() -> None:
    """Neural machine translation: prepare, train, translate, evaluate, align."""


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="nmt", standalone_mode=True)
    except KeyboardInterrupt:  # pragma: no cover - interactive
        click.echo("interrupted", err=True)
        sys.exit(130)


__all__ = ["cli", "main"]

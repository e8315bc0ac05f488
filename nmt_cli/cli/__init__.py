"""The ``nmt`` command: a Click group whose subcommands parse options and call the library.

Each subcommand lives in its own module here and registers itself on :data:`cli`; the
module is imported only when its command runs (see :data:`COMMAND_MODULES`), so
``nmt prepare`` never pays for importing torch. ``nmt --help``, ``nmt --version`` and
shell completion of the command names import no command module at all: the command list
shows :data:`COMMAND_HELP`, each command's one-line summary (tests/test_cli_startup.py
checks that every entry is the first paragraph of the command's own docstring).

Every failure ends here as one ``error:`` line and a non-zero exit, never a traceback:
errors the user can fix (:class:`~nmt_cli.errors.NmtError`) and operating-system errors
(a full disk, a read-only folder) exit 1; Ctrl-C and SIGTERM exit 130; anything else is
a bug, reported in one line with a hint. ``nmt --debug`` (or ``NMT_DEBUG=1``) shows the
traceback as well.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import traceback

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
    "distill": "distill",
    "score": "score",
    "export": "export",
    "shortlist": "shortlist",
    "serve": "serve",
}

#: subcommand -> the first paragraph of its docstring, what ``nmt --help`` and shell completion
#: list without importing the command's module (and torch with it); a test keeps them equal
COMMAND_HELP = {
    "prepare": "Read data.source, clean it, train SentencePiece and write token arrays to OUT.",
    "train": "Train a model on a prepared directory (multi-GPU: run it under torchrun).",
    "average": "Average the weights of a run's checkpoints (or of the checkpoint directories given).",
    "plot": "Draw a run's learning curve (loss and validation BLEU over steps) from its metrics.",
    "translate": "Translate text with a trained checkpoint (stdin to stdout by default).",
    "evaluate": "Score translations with sacreBLEU (BLEU, chrF, TER).",
    "align": "Align sentence pairs with a model's cross-attention (forced decoding of the given target).",
    "distill": "Distill a teacher (or an ensemble) into a small student: translate the training source, drop the "
               "worst pairs, prepare them with the teacher's pieces, train, average, export.",
    "score": "Score each sentence pair: log P(target | source), summed and per target token (EOS counted).",
    "export": "Export a Transformer checkpoint to CTranslate2 (pip install 'nmt-cli[ctranslate2]').",
    "shortlist": "Build a lexical shortlist: each source piece's K likeliest target pieces, and the most frequent "
                 "ones.",
    "serve": "Serve a checkpoint: POST /v1/translate, LibreTranslate's POST /translate, a web page at /.",
}


class NmtGroup(click.Group):
    """Loads subcommands lazily; turns every failure into one line and an exit status."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(COMMAND_MODULES) | set(self.commands))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMAND_MODULES:
            importlib.import_module(f"nmt_cli.cli.{COMMAND_MODULES[name]}")
        return self.commands.get(name)

    def summary(self, ctx: click.Context, name: str, limit: int = 45) -> str | None:
        """A command's one-line summary as Click shortens it (None: hidden or no such command);
        a command not loaded yet is not loaded when :data:`COMMAND_HELP` has its line."""
        if name not in self.commands and name in COMMAND_HELP:
            return click.utils.make_default_short_help(COMMAND_HELP[name], limit)
        command = self.get_command(ctx, name)
        return None if command is None or command.hidden else command.get_short_help_str(limit)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = [(name, summary) for name in names if (summary := self.summary(ctx, name, limit)) is not None]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list:
        from click.shell_completion import CompletionItem

        items = [CompletionItem(name, help=summary) for name in self.list_commands(ctx)
                 if name.startswith(incomplete) and (summary := self.summary(ctx, name)) is not None]
        return items + click.Command.shell_complete(self, ctx, incomplete)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            _report(ctx, "interrupted", shown=False)
            ctx.exit(130)
        except BrokenPipeError:  # the reader of our standard output went away: nothing to tell it
            _silence_stdout()
            ctx.exit(1)
        except NmtError as exc:
            _report(ctx, str(exc))  # a config can have several problems: a line each
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            _report(ctx, f"{where}{exc.strerror or exc}")
        except Exception as exc:  # a bug: still one line, with the way to see more
            first = (str(exc).strip().splitlines() or [""])[0]
            _report(ctx, f"unexpected {type(exc).__name__}: {first} (a bug in nmt; rerun with --debug "
                         "or NMT_DEBUG=1 for the traceback)")
        ctx.exit(1)


def _report(ctx: click.Context, message: str, shown: bool = True) -> None:
    """``error: <line>`` for each line of ``message`` (``message`` alone when not ``shown``
    as an error); with ``--debug`` the traceback first."""
    if ctx.params.get("debug"):
        traceback.print_exc()
    for line in message.splitlines():
        click.echo(f"error: {line}" if shown else line, err=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so flushing it at exit raises nothing more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


@click.group(cls=NmtGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nmt")
@click.option("--debug", is_flag=True, envvar="NMT_DEBUG",
              help="Show the Python traceback of an error too (also: NMT_DEBUG=1).")
def cli(debug: bool) -> None:
    """Neural machine translation: prepare, train, translate, evaluate, align."""


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """The ``nmt`` executable: SIGTERM stops a command as Ctrl-C does (outputs left whole or absent)."""
    signal.signal(signal.SIGTERM, _interrupt)
    cli.main(args=argv, prog_name="nmt", standalone_mode=True)


__all__ = ["cli", "main"]

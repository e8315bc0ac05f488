"""Options shared by several subcommands: a config file and ``--set section.key=value``."""

from __future__ import annotations

import functools
from typing import Any, Callable

import click

from nmt_cli.config import Config, load_config, parse_overrides


def config_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--config FILE`` and repeatable ``--set KEY=VALUE``; pass the resolved ``config``."""

    @click.option("--config", "-c", "config_path", type=click.Path(dir_okay=False), default=None,
                  help="YAML config or recipe (defaults: the built-in settings).")
    @click.option("--set", "overrides", multiple=True, metavar="SECTION.KEY=VALUE",
                  help="Override one setting, e.g. --set train.max_steps=100 (repeatable).")
    @functools.wraps(func)
    def wrapper(*args: Any, config_path: str | None, overrides: tuple[str, ...], **kwargs: Any) -> Any:
        config: Config = load_config(config_path, parse_overrides(overrides))
        return func(*args, config=config, **kwargs)

    return wrapper

"""Every extension point of nmt-cli, registered the same way.

A :class:`Registry` maps names to factories. An entry registers itself where it is
defined, with ``@REGISTRY.register("name")``; the registry imports every module of its
package the first time it is asked for a name, so a new model family, attention score or
kernel, search strategy, training objective, data source or engine is one new module in
that package plus its registration, and nothing else to wire. The config key that chooses
an entry is declared with :func:`nmt_cli.config.registered`, which validates the value
against the registry's names.

The registries live here, in the bottom layer, so that :mod:`nmt_cli.config` can validate
a choice without importing the layers above it; discovery imports them by name, when a
value is first checked or built.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, Generic, TypeVar

from nmt_cli.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Names -> factories of one extension point; ``register`` is a decorator, duplicates are refused.

    ``kind`` names the extension point in messages, ``key`` the setting that chooses an
    entry, and ``package`` the package whose modules hold the entries (every module in it
    is imported, non-recursively, before the first lookup; modules whose names start with
    ``_`` are skipped).
    """

    def __init__(self, kind: str, key: str, package: str):
        self.kind = kind
        self.key = key
        self.package = package
        self._entries: dict[str, T] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        self.load()
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(
                f"{self.key}: unknown {self.kind} {name!r}; valid: {', '.join(sorted(self._entries))}"
            ) from None

    def names(self) -> list[str]:
        self.load()
        return sorted(self._entries)

    def load(self) -> None:
        """Import every module of the package once, so each entry's registration has run."""
        if self._loaded:
            return
        package = importlib.import_module(self.package)
        for module in pkgutil.iter_modules(getattr(package, "__path__", [])):
            if not module.name.startswith("_"):
                importlib.import_module(f"{self.package}.{module.name}")
        self._loaded = True


#: model families (``model.arch``): classes with ``from_config`` implementing ``models/base.py``
MODEL_FAMILIES: Registry = Registry("model family", "model.arch", "nmt_cli.models")
#: the RNN decoders' attention scores (``model.attention``): ``ScoreAttention`` subclasses
ATTENTION_SCORES: Registry = Registry("attention score", "model.attention", "nmt_cli.models.attention")
#: the Transformer's attention kernels (``summarize/read/causal/step/reorder``)
ATTENTION_KERNELS: Registry = Registry("attention kernel", "model.attention_kernel",
                                       "nmt_cli.models.attention")
#: search strategies (``decode.search``): ``Search`` subclasses built from a batch's requests
SEARCH_STRATEGIES: Registry = Registry("search strategy", "decode.search", "nmt_cli.decoding.strategies")
#: training objectives (``train.objective``): built from the config and an ``ObjectiveContext``
OBJECTIVES: Registry = Registry("training objective", "train.objective", "nmt_cli.training.objectives")
#: data sources (``data.source``, ``data.corpora[].source``): ``Corpus`` readers
DATA_SOURCES: Registry = Registry("data source", "data.source", "nmt_cli.data.sources")
#: translation engines (``--engine``): loaders of a model directory with the Translator interface
ENGINES: Registry = Registry("engine", "--engine", "nmt_cli.decoding.engines")

__all__ = ["Registry", "MODEL_FAMILIES", "ATTENTION_SCORES", "ATTENTION_KERNELS", "SEARCH_STRATEGIES", "OBJECTIVES",
           "DATA_SOURCES", "ENGINES"]

"""A name -> constructor registry; unknown names fail with the list of valid ones."""

from __future__ import annotations

from typing import Callable, Generic, TypeVar

from nmt_cli.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories. ``register`` is a decorator; duplicates are refused."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = obj
            return obj

        return decorator

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.kind} {name!r}; valid: {', '.join(sorted(self._entries))}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

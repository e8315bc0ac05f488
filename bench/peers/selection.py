"""Which peers a bench run uses, and how a peer that cannot run shows up in a table."""

from __future__ import annotations

import importlib
from types import ModuleType

from peers.install import PEERS, availability, install

TRAINING_PEERS = ("opennmt", "fairseq")
TRANSLATION_PEERS = ("opennmt",)  # the equal-work table: CTranslate2 runs our own export


def parse_peer_list(text: str, allowed: tuple[str, ...]) -> list[str]:
    """``"all"``, ``"none"`` or a comma list of peer names, checked against ``allowed``."""
    if text == "all":
        return list(allowed)
    if text in ("none", ""):
        return []
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise SystemExit(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(allowed)}, all or none")
    return names


def ready_peers(names: list[str], quick: bool) -> tuple[dict[str, ModuleType], dict[str, str]]:
    """({peer: runner module} usable now, {peer: why not} for the others).

    A full run installs missing peers first (idempotent, failures recorded); ``quick``
    uses only the peers already installed.
    """
    runners: dict[str, ModuleType] = {}
    missing: dict[str, str] = {}
    for name in names:
        if not quick:
            install(name)
        usable, text = availability(name)
        if usable:
            runners[name] = importlib.import_module(f"peers.{name}")
        else:
            missing[name] = text
    return runners, missing


def peer_label(name: str) -> str:
    """The table name of a peer (its pinned version)."""
    return PEERS[name].label

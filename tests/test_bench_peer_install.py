"""``bench/peers/install.py``: a peer counts as installed only when its record and every command
the bench runs from its venv are there, with the interpreters they name."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from peers import install as install_module  # noqa: E402  (bench/ is not a package)


def _tool(path: Path, executable: bool = True, interpreter: str = "/bin/sh") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{interpreter}\n")
    path.chmod(0o755 if executable else 0o644)


@pytest.mark.parametrize("peer", sorted(install_module.PEERS))
def test_a_venv_that_lost_a_command_is_not_installed_and_is_installed_again(peer: str, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(install_module, "PEERS_ROOT", tmp_path)
    spec = install_module.PEERS[peer]
    record = {"peer": peer, "label": spec.label, "seconds": 1.0, "versions": {}}
    (tmp_path / peer).mkdir()
    (tmp_path / peer / "installed.json").write_text(json.dumps(record))
    _tool(install_module.venv_bin(peer, "python"))
    assert spec.commands and install_module.install_record(peer) is None  # no command yet
    for command in spec.commands:
        _tool(install_module.venv_bin(peer, command))
    assert install_module.install_record(peer) == record
    assert install_module.availability(peer) == (True, spec.label)

    missing = install_module.venv_bin(peer, spec.commands[-1])
    _tool(missing, interpreter=str(tmp_path / "moved-away" / "bin" / "python"))  # a venv made elsewhere
    assert install_module.install_record(peer) is None
    _tool(missing, executable=False)
    assert install_module.install_record(peer) is None
    missing.unlink()
    assert install_module.install_record(peer) is None
    assert install_module.availability(peer)[0] is False

    steps = []
    monkeypatch.setattr(install_module.subprocess, "run", lambda command, **kwargs: steps.append(command))
    monkeypatch.setattr(install_module, "_pip", lambda name, args, log: steps.append(args))
    monkeypatch.setattr(install_module, "_installed_versions", lambda name: {})
    install_module.install(peer)  # not skipped: the venv is made again
    assert steps[0][1:4] == ["-m", "venv", "--clear"] and len(steps) == 1 + spec.needs_torch + len(spec.steps)


def test_every_command_the_bench_runs_from_a_peer_venv_is_listed() -> None:
    """The runners' ``venv_bin(PEER, tool)`` calls name only tools their peer's spec lists."""
    called: dict[str, set[str]] = {}
    for path in (REPO / "bench").rglob("*.py"):
        if any(part.startswith(".") for part in path.relative_to(REPO / "bench").parts):  # the peers' venvs, work
            continue
        text = path.read_text(encoding="utf-8")
        for peer in install_module.PEERS:
            calls = [f'venv_bin("{peer}", "']
            if f'PEER = "{peer}"' in text:  # a runner module of that peer
                calls.append('venv_bin(PEER, "')
            for call in calls:
                for after in text.split(call)[1:]:
                    called.setdefault(peer, set()).add(after.split('"', 1)[0])
    assert set(called) == set(install_module.PEERS)
    for peer, tools in called.items():
        assert tools <= set(install_module.PEERS[peer].commands), (peer, tools)

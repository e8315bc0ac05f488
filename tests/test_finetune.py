"""Reusing trained models: fine-tuning (--init-from), data encoded with an existing
tokenizer (--tokenizer-from), and training corpora mixed by weight."""

from __future__ import annotations

import io
import json

import pytest
import torch
from click.testing import CliRunner

from nmt_cli.checkpoint import load_checkpoint, load_optimizer_state
from nmt_cli.cli import cli
from nmt_cli.cli import prepare as _prepare_command  # noqa: F401  (registers `nmt prepare`)
from nmt_cli.cli import train as _train_commands  # noqa: F401  (registers `nmt train`)
from nmt_cli.config import Config
from nmt_cli.data.prepare import prepare
from nmt_cli.data.prepared import PreparedData
from nmt_cli.errors import NmtError
from nmt_cli.training import train
from nmt_cli.training.distributed import DistributedContext
from nmt_cli.training.run_dir import RunDirectory
from nmt_cli.training.trainer import Trainer
from tests.test_trainer import QUICK, TINY_TRANSFORMER

GENERAL = {**QUICK, **TINY_TRANSFORMER, "train.max_steps": 12, "train.valid_every": 6, "train.log_every": 6}


def write_corpus(folder, name, pairs):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.de").write_text("".join(de + "\n" for de, _ in pairs), encoding="utf-8")
    (folder / f"{name}.en").write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")


@pytest.fixture(scope="module")
def general_run(tiny_prepared, tmp_path_factory):
    run = tmp_path_factory.mktemp("general") / "run"
    train(Config().with_overrides(GENERAL), tiny_prepared, run, stream=io.StringIO())
    return run


@pytest.fixture(scope="module")
def in_domain(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ted")
    pairs = [(f"Das Haus {i} ist groß.", f"The house {i} is big.") for i in range(40)]
    write_corpus(folder, "train", pairs)
    write_corpus(folder, "dev", pairs[:5])
    return folder


def in_domain_config(folder) -> Config:
    return Config().with_overrides({"data.source": "files", "data.path": str(folder), "data.valid_split": "dev",
                                    "data.test_split": "", "data.vocab_size": 300})


def test_tokenizer_from_encodes_new_data_with_the_models_pieces(general_run, tiny_prepared, in_domain, tmp_path):
    result = CliRunner().invoke(cli, ["prepare", "--out", str(tmp_path / "ted"), "--tokenizer-from", str(general_run),
                                      "--set", "data.source=files", "--set", f"data.path={in_domain}",
                                      "--set", "data.valid_split=dev", "--set", "data.test_split=", "-q"])
    assert result.exit_code == 0, result.output
    assert "(from " in result.stdout
    ted = PreparedData(tmp_path / "ted")
    assert ted.tokenizer.model_files() == PreparedData(tiny_prepared).tokenizer.model_files()
    assert ted.manifest["tokenizer"]["from"] == str(load_checkpoint(general_run).path)
    assert ted.manifest["tokenizer"]["sampled_pairs"] == 0


def test_init_from_starts_a_new_run_from_the_weights_with_a_fresh_optimizer(general_run, tiny_prepared, tmp_path):
    source = load_checkpoint(general_run)
    config = Config().with_overrides({**GENERAL, "train.init_from": str(general_run)})
    trainer = Trainer(config, PreparedData(tiny_prepared), RunDirectory(tmp_path / "ft"), DistributedContext())
    for name, tensor in trainer.model.state_dict().items():
        torch.testing.assert_close(tensor, source.weights[name], rtol=0, atol=0)
    assert trainer.updater.optimizer.state_dict()["state"] == {}  # fresh optimizer
    assert trainer.updater.learning_rate == pytest.approx(3e-3 / 10)  # the schedule starts over
    assert trainer.state.step == 0 and trainer.state.init_from["step"] == 12

    kept = Config().with_overrides({**GENERAL, "train.init_from": str(general_run),
                                    "train.init_keep": ["optimizer", "schedule"]})
    trainer = Trainer(kept, PreparedData(tiny_prepared), RunDirectory(tmp_path / "kept"), DistributedContext())
    saved = load_optimizer_state(general_run)["optimizer"]["state"]
    assert float(trainer.updater.optimizer.state_dict()["state"][0]["step"]) == float(saved[0]["step"]) == 12
    assert trainer.updater.learning_rate == pytest.approx(3e-3 * (10 / 13) ** 0.5)  # update 13 of the schedule


def test_a_fine_tuning_run_records_where_it_started(general_run, tiny_prepared, tmp_path):
    log = io.StringIO()
    config = Config().with_overrides({**GENERAL, "train.max_steps": 3, "train.init_from": str(general_run)})
    summary = train(config, tiny_prepared, tmp_path / "ft", stream=log)
    assert "fine-tuning from" in log.getvalue().splitlines()[0]
    assert summary.init_from["checkpoint"] == str(load_checkpoint(general_run).path)
    state = json.loads((summary.last_checkpoint / "state.json").read_text())
    assert state["init_from"] == summary.init_from and state["step"] == 3
    assert json.loads((tmp_path / "ft" / "summary.json").read_text())["init_from"] == summary.init_from


def test_mismatches_are_one_line_errors_before_any_training(general_run, in_domain, tmp_path):
    other = tmp_path / "other"
    prepare(in_domain_config(in_domain), other, progress=False)
    with pytest.raises(NmtError, match=r"another SentencePiece model.*--tokenizer-from"):
        train(Config().with_overrides({**GENERAL, "train.init_from": str(general_run)}), other, tmp_path / "a")
    wider = Config().with_overrides({**GENERAL, "model.d_model": 48, "train.init_from": str(general_run)})
    with pytest.raises(NmtError, match=r"model.d_model=32, the config says 48; fine-tuning needs the same"):
        train(wider, other, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_corpora_mixed_by_weight_are_recorded_and_sampled(in_domain, tmp_path):
    general = tmp_path / "general"
    write_corpus(general, "train", [(f"Ein Hund {i} läuft.", f"A dog {i} runs.") for i in range(60)])
    config = in_domain_config(in_domain).with_overrides({
        "data.weight": 2.0,
        "data.corpora": [{"name": "general", "source": "files", "path": str(general), "weight": 0.5}],
    })
    manifest = prepare(config, tmp_path / "mixed", progress=False)
    corpora = manifest["splits"]["train"]["corpora"]
    assert [(c["name"], c["pairs"], c["weight"]) for c in corpora] == [("main", 40, 2.0), ("general", 60, 0.5)]
    assert "train:general" in manifest["inputs"]
    data = PreparedData(tmp_path / "mixed")
    assert data.corpus_mix() == [(0, 40, 2.0), (40, 100, 0.5)]
    assert data.config.data.corpora[0].path == str(general.resolve())
    log = io.StringIO()
    run = Config().with_overrides({**QUICK, **TINY_TRANSFORMER, "train.max_steps": 2, "train.valid_every": 0})
    train(run, tmp_path / "mixed", tmp_path / "run", stream=log)
    assert "100 training pairs (mixed: main 40 x2, general 60 x0.5)" in log.getvalue()
    # a changed weight is a change of the prepared data: prepare rebuilds
    reweighted = config.with_overrides({"data.weight": 1.0})
    assert not prepare(reweighted, tmp_path / "mixed", progress=False)["reused"]

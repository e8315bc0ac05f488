"""Config loading: YAML files, --set overrides and one-line errors naming keys and choices."""

from __future__ import annotations

import pytest

from nmt_cli.config import Config, DataConfig, config_replace, load_config, parse_overrides
from nmt_cli.errors import ConfigError


def test_defaults_without_file():
    config = load_config()
    assert config == Config()
    assert config.data.source == "synthetic" and config.data.on_invalid == "error"


def test_yaml_file_and_overrides(tmp_path):
    path = tmp_path / "recipe.yaml"
    path.write_text("data:\n  source: files\n  path: ../shared/data/multi30k\n  valid_split: val\n"
                    "  vocab_size: 500\n")
    config = load_config(path, parse_overrides(["data.vocab_size=300", "data.joint_vocab=false",
                                                "data.max_length_ratio=2"]))
    assert config.data.source == "files" and config.data.valid_split == "val"
    assert config.data.vocab_size == 300 and config.data.joint_vocab is False
    assert config.data.max_length_ratio == 2.0 and isinstance(config.data.max_length_ratio, float)


def test_round_trip_through_yaml(tmp_path):
    config = load_config(None, {"data.source": "tsv", "data.dedup": True, "data.on_invalid": "skip"})
    path = tmp_path / "config.yaml"
    path.write_text(config.to_yaml())
    assert load_config(path) == config


def test_unknown_key_lists_valid_keys(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("data:\n  sorce: files\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "data.sorce" in message and "source" in message and "on_invalid" in message


def test_unknown_override_key():
    with pytest.raises(ConfigError, match=r"unknown config key 'data.vocab'.*vocab_size"):
        load_config(None, parse_overrides(["data.vocab=100"]))


def test_unknown_section():
    with pytest.raises(ConfigError, match="unknown config section 'dta'"):
        Config.from_dict({"dta": {}})


@pytest.mark.parametrize("override, expected", [
    ("data.vocab_size=lots", "expected an integer"),
    ("data.dedup=maybe", "expected true or false"),
    ("data.max_length_ratio=wide", "expected a number"),
])
def test_bad_values(override, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(None, parse_overrides([override]))


def test_bad_choice_lists_choices():
    with pytest.raises(ConfigError) as info:
        load_config(None, {"data.source": "csv"})
    assert "'csv' is not one of: synthetic, files, tsv, jsonl, hf, hf_disk" in str(info.value)
    with pytest.raises(ConfigError, match="error, skip"):
        config_replace(Config(), "data", on_invalid="ignore")


def test_bad_set_syntax_and_invalid_yaml(tmp_path):
    with pytest.raises(ConfigError, match="expected <section>.<key>=<value>"):
        parse_overrides(["data.vocab_size"])
    path = tmp_path / "broken.yaml"
    path.write_text("data:\n  source: [files\n")
    with pytest.raises(ConfigError, match=rf"{path}:\d+: invalid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_data_fields_have_help_for_new_settings():
    documented = {f.name for f in DataConfig.__dataclass_fields__.values() if f.metadata.get("help")}
    assert {"source", "path", "on_invalid", "dedup", "max_length_ratio", "spm_input_sentence_size"} <= documented

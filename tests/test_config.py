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
    config = load_config(None, {"data.source": "tsv", "data.path": "corpus", "data.dedup": True,
                                "data.on_invalid": "skip"})
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


def problem_lines(path, settings: tuple[str, ...] | list[str] = ()) -> list[str]:
    """The lines of the ConfigError that loading ``path`` with the ``--set`` values ``settings``
    raises, one problem each."""
    with pytest.raises(ConfigError) as info:
        load_config(path, parse_overrides(list(settings)))
    return str(info.value).splitlines()


def test_every_bad_override_is_reported_at_once():
    lines = problem_lines(None, ["train.foo=1", "data.vocab_size=lots", "trian.max_steps=5", "train.bar=2"])
    assert len(lines) == 4
    assert "unknown config key 'train.foo'" in lines[0] and "bad override key 'trian.max_steps'" in lines[1]
    assert "unknown config key 'train.bar'" in lines[2] and "expected an integer" in lines[3]


def test_a_bad_file_and_bad_override_keys_are_reported_together(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("data:\n  vocab_size: lots\n")
    lines = problem_lines(path, ["train.foo=1", "train.max_steps=5"])
    assert len(lines) == 2
    assert lines[0].startswith(f"{path}: ") and "expected an integer" in lines[0]
    assert "unknown config key 'train.foo'" in lines[1]
    path.write_text("train:\n  max_steps: many\n")  # with a bad --set value: the file's problems come first
    lines = problem_lines(path, ["data.vocab_size=lots", "train.foo=1"])
    assert len(lines) == 3
    assert lines[0].startswith(f"{path}: ") and "'train.max_steps'" in lines[0]
    assert "unknown config key 'train.foo'" in lines[1]
    assert lines[2].startswith("config key 'data.vocab_size'") and "expected an integer" in lines[2]


def test_a_set_mends_a_bad_value_of_the_file(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("train:\n  lr: -1\n  max_steps: 7\n")
    config = load_config(path, parse_overrides(["train.lr=0.001"]))
    assert config.train.lr == 0.001 and config.train.max_steps == 7
    with pytest.raises(ConfigError) as info:  # a bad --set value is still refused, without the file's name
        load_config(path, parse_overrides(["train.lr=-2"]))
    assert str(info.value) == "config key 'train.lr': must be at least 0, got -2.0"
    path.write_text("train:\n")  # an empty section
    assert load_config(path, parse_overrides(["train.max_steps=5"])).train.max_steps == 5


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
    assert "'csv' is not one of: files, hf, hf_disk, jsonl, synthetic, tsv" in str(info.value)
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


def test_every_problem_is_reported_at_once_one_line_each(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("train:\n  max_tokens: 0\n  update_freq: lots\n  early_stop_metric: bleu\n  valid_bleu: false\n"
                    "decode:\n  beam_size: 2\n  nbest: 3\n  top_p: 1.5\nmodel:\n  d_model: 10\n  heads: 4\n"
                    "  colour: red\n")
    lines = problem_lines(path)
    assert all(line.startswith(f"{path}: ") for line in lines)
    expected = [
        "config key 'train.update_freq': expected an integer, got 'lots'",
        "config key 'train.max_tokens': must be at least 1, got 0",
        "config key 'decode.top_p': must be at most 1, got 1.5",
        "unknown config key 'model.colour'",
    ]
    for text in expected:
        assert sum(text in line for line in lines) == 1, (text, lines)
    # rules that tie keys together run once the section's own values are in range
    fixed = path.read_text().replace("max_tokens: 0", "max_tokens: 10").replace("lots", "2")
    path.write_text(fixed.replace("top_p: 1.5", "top_p: 0.5").replace("  colour: red\n", ""))
    lines = problem_lines(path)
    assert len(lines) == 3
    for text in ("bleu needs train.valid_bleu=true", "'model.d_model': 10 is not divisible by model.heads=4",
                 "'decode.nbest': must be at most decode.beam_size (2), got 3"):
        assert sum(text in line for line in lines) == 1, (text, lines)


@pytest.mark.parametrize("override, expected", [
    ("decode.max_tokens=-1", "'decode.max_tokens': must be at least 0, got -1"),
    ("decode.workers=0", "'decode.workers': must be at least 1"),
    ("model.dropout=1.0", "'model.dropout': must be below 1"),
    ("model.local_window=0", "'model.local_window': must be at least 1"),
    ("model.linear_sites=decoder", "'decoder' is not one of: encoder_self, decoder_self, cross"),
    ("train.adam_betas=[0.9]", "'train.adam_betas': needs two values in [0, 1)"),
    ("data.tgt_lang=de", "'data.src_lang' and 'data.tgt_lang' are both 'de'"),
])
def test_values_found_only_at_first_use_before_are_refused_when_loaded(override, expected):
    with pytest.raises(ConfigError) as info:
        load_config(None, parse_overrides([override]))
    assert expected in str(info.value)


def test_family_rules_apply_only_to_their_family():
    assert load_config(None, {"model.arch": "rnn_luong", "model.d_model": 10, "model.heads": 4}).model.d_model == 10
    with pytest.raises(ConfigError, match="rnn_bahdanau needs an even size"):
        load_config(None, {"model.arch": "rnn_bahdanau", "model.hidden_size": 9})
    with pytest.raises(ConfigError, match="linear_transformer needs any of"):
        load_config(None, {"model.arch": "linear_transformer", "model.linear_sites": []})
    with pytest.raises(ConfigError, match="sinusoidal positions need an even size"):
        load_config(None, {"model.d_model": 9, "model.heads": 1})


def test_sections_built_in_python_are_checked_too():
    from nmt_cli.config import DecodeConfig

    with pytest.raises(ConfigError, match="decode.nbest"):
        DecodeConfig(beam_size=2, nbest=3)

"""Decoding: pure search steps, one generation loop for every model, the Translator API."""

from nmt_cli.decoding.generator import generate
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.decoding.translator import LongInputError, Translator

__all__ = ["generate", "Hypothesis", "LongInputError", "Translator"]

"""Decoding: pure search steps, one generation loop for every model, the Translator API."""

from nmt_cli.decoding.generator import generate
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.decoding.loader import ENGINES, load_translator
from nmt_cli.decoding.translator import Translator

__all__ = ["ENGINES", "generate", "Hypothesis", "load_translator", "Translator"]

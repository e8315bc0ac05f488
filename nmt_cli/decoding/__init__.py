"""Decoding: pure search steps, one generation loop for every model (and ensembles of them),
forced scoring, the Translator API."""

from nmt_cli.decoding.ensemble import Ensemble
from nmt_cli.decoding.generator import generate
from nmt_cli.decoding.hypothesis import Hypothesis
from nmt_cli.decoding.loader import load_translator
from nmt_cli.decoding.request import SentenceError, UnfitConstraintsError
from nmt_cli.decoding.scoring import PairScore, score_pairs
from nmt_cli.decoding.translator import LongInputError, Translator

__all__ = ["Ensemble", "generate", "Hypothesis", "LongInputError", "load_translator", "PairScore",
           "score_pairs", "SentenceError", "Translator", "UnfitConstraintsError"]

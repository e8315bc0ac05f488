"""``synthetic``: the built-in grammar (:mod:`nmt_cli.data.synthetic`), with gold word links."""

from __future__ import annotations

from typing import Any, Iterator

from nmt_cli.config import DataConfig
from nmt_cli.data import synthetic
from nmt_cli.data.sources.base import Corpus, RawPair
from nmt_cli.registry import DATA_SOURCES


@DATA_SOURCES.register("synthetic")
class SyntheticCorpus(Corpus):
    """The built-in German-English grammar, with gold word links; each split has its own seed (``<seed>:<split>``)."""

    mixable = False  # its sizes and seed are data.synthetic_*, not a path and a split

    def __init__(self, data: DataConfig):
        super().__init__(data)
        self.sizes = {"train": data.synthetic_train_size, "valid": data.synthetic_valid_size,
                      "test": data.synthetic_test_size}

    def splits(self) -> dict[str, str]:
        return {name: name for name, size in self.sizes.items() if size > 0}

    def pairs(self, split: str) -> Iterator[RawPair]:
        german_first = self.src_lang == "de"
        stream = synthetic.generate(f"{self.data.synthetic_seed}:{split}")
        for line, pair in zip(range(1, self.sizes[split] + 1), stream):
            if german_first:
                yield RawPair(line, pair.german, pair.english, pair.alignment)
            else:
                yield RawPair(line, pair.english, pair.german, invert_alignment(pair.alignment))

    def fingerprint(self, split: str) -> dict[str, Any]:
        return {"generator": "synthetic", "grammar_version": synthetic.GRAMMAR_VERSION,
                "seed": f"{self.data.synthetic_seed}:{split}", "pairs": self.sizes[split]}

    def size_hint(self, split: str) -> int | None:
        return self.sizes[split]

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self.data.synthetic_seed, "sizes": self.sizes,
                "grammar_version": synthetic.GRAMMAR_VERSION}


def invert_alignment(alignment: str) -> str:
    """Swap the sides of a Pharaoh alignment (``i-j`` -> ``j-i``), sorted."""
    links = sorted((int(j), int(i)) for i, _, j in (link.partition("-") for link in alignment.split()))
    return " ".join(f"{i}-{j}" for i, j in links)

"""``hf`` and ``hf_disk``: splits of Hugging Face ``datasets``, from the hub or a
``save_to_disk`` folder. Rows have a ``translation`` column (``{"de": ..., "en": ...}``) or
one column per language. ``datasets`` is imported only when a split is read.

Either way the rows are read in batches of :data:`HF_BATCH`, so a split never sits whole in
memory here. With ``data.streaming`` the hub's split is an ``IterableDataset``: ``nmt
prepare`` reads it once, front to back (it cleans and writes the text as it goes; its later
passes read that text, never the stream), and downloads nothing it does not read
(``data.max_train_pairs`` stops it early). Without it, ``load_dataset`` first downloads
the whole split and converts it into the Hugging Face cache, memory-mapped from there."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from nmt_cli.config import DataConfig
from nmt_cli.data.sources.base import Corpus, RawPair, file_digest, pair_from_record
from nmt_cli.errors import InputError, NmtError
from nmt_cli.registry import DATA_SOURCES

HF_BATCH = 1000


class DatasetsCorpus(Corpus):
    """Rows of a ``datasets`` split, read in batches; the language columns are found once."""

    def dataset(self, split: str) -> Any:
        raise NotImplementedError

    def pairs(self, split: str) -> Iterator[RawPair]:
        dataset = self.dataset(split)
        where = f"{self.data.path}[{split}]"
        line = 0
        for batch in dataset.iter(batch_size=HF_BATCH):
            if line == 0:
                self._check_columns(batch, where)
            rows = batch.get("translation") or [dict(zip(batch, values)) for values in zip(*batch.values())]
            for record in rows:
                line += 1
                yield pair_from_record(record, line, where, self.src_lang, self.tgt_lang)

    def _check_columns(self, batch: dict[str, list], where: str) -> None:
        if "translation" in batch:
            return
        missing = [lang for lang in (self.src_lang, self.tgt_lang) if lang not in batch]
        if missing:
            raise InputError(where, f"no 'translation' column and no '{missing[0]}' column "
                                    f"(columns: {', '.join(batch) or 'none'})")


def _directory_fingerprint(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` (relative path -> digest)."""
    return {str(p.relative_to(folder)): file_digest(p)[0]
            for p in sorted(folder.rglob("*")) if p.is_file() and ".cache" not in p.parts}


def _one_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


@DATA_SOURCES.register("hf")
class HubCorpus(DatasetsCorpus):
    """``load_dataset(path, hf_config, split=...)``: a hub id, or a local folder in hub layout (``data.streaming``: as a stream)."""

    def __init__(self, data: DataConfig):
        super().__init__(data)
        self._opened: dict[str, Any] = {}

    def dataset(self, split: str) -> Any:
        """The split as ``load_dataset`` gives it: an ``IterableDataset`` with ``data.streaming``
        (each iteration opens the stream again), else a ``Dataset`` in the cache; opened once."""
        if split not in self._opened:
            import datasets

            try:
                self._opened[split] = datasets.load_dataset(self.data.path, self.data.hf_config or None, split=split,
                                                            streaming=self.data.streaming)
            except Exception as exc:  # datasets raises many types; show one line, never a traceback
                raise NmtError(f"{self.data.path}: cannot load split '{split}' ({_one_line(exc)})") from None
        return self._opened[split]

    def size_hint(self, split: str) -> int | None:
        """The row count: the downloaded split's, or what the dataset card says of a stream (else None)."""
        dataset = self.dataset(split)
        if not self.data.streaming:
            return len(dataset)
        listed = (dataset.info.splits or {}).get(split)
        return listed.num_examples if listed is not None and listed.num_examples else None

    def fingerprint(self, split: str) -> dict[str, Any]:
        identity = {"dataset": self.data.path, "config": self.data.hf_config, "split": split}
        local = Path(self.data.path).expanduser()
        if local.is_dir():
            identity["files"] = _directory_fingerprint(local.resolve())
        return identity


@DATA_SOURCES.register("hf_disk")
class DiskDatasetCorpus(DatasetsCorpus):
    """A ``DatasetDict.save_to_disk`` folder: ``datasets.load_from_disk(path)[split]``."""

    def __init__(self, data: DataConfig):
        super().__init__(data)
        self.folder = Path(data.path).expanduser().resolve()
        self._loaded: Any = None

    def _dataset_dict(self) -> Any:
        if self._loaded is None:
            import datasets

            try:
                self._loaded = datasets.load_from_disk(str(self.folder))
            except Exception as exc:
                raise InputError(self.folder, f"cannot load a saved dataset ({_one_line(exc)})") from None
            if not isinstance(self._loaded, datasets.DatasetDict):
                raise InputError(self.folder, "expected a DatasetDict (with splits) saved by save_to_disk")
        return self._loaded

    def dataset(self, split: str) -> Any:
        loaded = self._dataset_dict()
        if split not in loaded:
            raise InputError(self.folder, f"no split '{split}' (splits: {', '.join(loaded)})")
        return loaded[split]

    def fingerprint(self, split: str) -> dict[str, Any]:
        self.dataset(split)  # fails with one line when the folder or split is missing
        return {"split": split, "files": _directory_fingerprint(self.folder / split)}

    def size_hint(self, split: str) -> int | None:
        return len(self.dataset(split))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": str(self.folder), "splits": self.splits()}

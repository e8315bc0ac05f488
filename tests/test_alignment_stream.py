"""`nmt align` streams: pairs are read, aligned and written a chunk at a time, every output is
the same whatever the chunk size, the reader is never more than a chunk ahead of the
writer, and a stopped run resumes at its first unfinished chunk."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from nmt_cli.alignment import corpus as corpus_module
from nmt_cli.alignment import output as output_module
from nmt_cli.alignment.api import Aligner, AlignOptions
from nmt_cli.alignment.corpus import align_into, link_chunks
from nmt_cli.alignment.output import HeatmapChoice, load_soft_npz
from nmt_cli.alignment.reader import SentenceAlignment
from nmt_cli.cli import cli
from nmt_cli.cli import align as _align_command  # noqa: F401  (registers `nmt align`)
from nmt_cli.errors import InputError, NmtError
from nmt_cli.pharaoh import read_alignments
from nmt_cli.resumable import CHUNKS
from tests.interrupting import recording
from tests.test_cli_align import SRC, TGT, make_checkpoint

PAIRS = list(zip(SRC * 3, TGT * 3))[:8]  # 8 pairs: chunks of 3 end with a short one
GOLD = "0-0 1-1 2-2 3-3\n0-0 1-1 2p2 3-4 4-6 5-3\n0-0 1-1 2-2 9-9\n"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    (root / "gold").write_text("".join(GOLD.splitlines(keepends=True)[n % 3] for n in range(8)), encoding="utf-8")
    return {"root": root, "forward": make_checkpoint(root / "fwd", "transformer"),
            "reverse": make_checkpoint(root / "rev", "rnn_bahdanau")}


def aligner(models, batch_size=1):
    return Aligner(models["forward"], AlignOptions(batch_size=batch_size), "cpu", models["reverse"])


def output_bytes(directory):
    """Every file an alignment run wrote, by relative path (``soft.npz``: its arrays, since a zip
    records when each entry was written)."""
    files = {str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*"))
             if path.is_file() and path.name != "soft.npz"}
    sentences, settings = load_soft_npz(directory / "soft.npz")
    files["soft.npz"] = json.dumps(settings) + "".join(
        json.dumps([s.src_words, s.tgt_words, s.links]) + s.matrix.tobytes().hex() for s in sentences)
    return files


def test_every_output_is_the_same_for_any_chunk_size(models, tmp_path):
    heatmaps = HeatmapChoice(first=1, lines=(5,))
    runs = {}
    for chunk in (1, 3, 1000):
        out = tmp_path / f"chunk-{chunk}"
        written = align_into(aligner(models), PAIRS, out, heatmaps, models["root"] / "gold", chunk_lines=chunk,
                             progress=False)
        assert written.pairs == 8 and written.score is not None
        runs[chunk] = (output_bytes(out), written.score)
        assert not (out / CHUNKS).exists()  # the chunks go once the outputs are written
    assert runs[1] == runs[3] == runs[1000]
    assert sorted(name for name in runs[1][0] if name.startswith("heatmaps")) == [
        "heatmaps/line-000001.png", "heatmaps/line-000005.png"]
    # the same alignments as the aligner gives for the whole text at once
    whole = aligner(models).align([s for s, _ in PAIRS], [t for _, t in PAIRS])
    assert [set(pair.sure) for pair in read_alignments(tmp_path / "chunk-3" / "alignments.align")] == [
        set(sentence.links) for sentence in whole]
    soft = json.loads((tmp_path / "chunk-3" / "soft.json").read_text(encoding="utf-8"))
    assert [entry["line"] for entry in soft["sentences"]] == list(range(1, 9))
    np.testing.assert_array_equal(np.array(soft["sentences"][4]["matrix"]), np.round(whole[4].matrix, 4))


def test_with_larger_batches_chunks_change_only_the_last_digits(models, tmp_path):
    """A chunk is batched on its own, so pairs padded together differ with the chunk size."""
    one = align_into(aligner(models, batch_size=8), PAIRS, tmp_path / "one", chunk_lines=1, progress=False)
    all_ = align_into(aligner(models, batch_size=8), PAIRS, tmp_path / "all", chunk_lines=8, progress=False)
    assert one.pairs == all_.pairs == 8
    assert (tmp_path / "one" / "alignments.align").read_bytes() == (tmp_path / "all" / "alignments.align").read_bytes()
    for a, b in zip(load_soft_npz(tmp_path / "one" / "soft.npz")[0], load_soft_npz(tmp_path / "all" / "soft.npz")[0]):
        np.testing.assert_allclose(a.matrix, b.matrix, atol=1e-5)


class Spy:
    """Counts the pairs the reader has given and the pairs written to the outputs."""

    def __init__(self):
        self.read = self.written = self.most_ahead = 0
        self.chunks: list[int] = []

    def pairs(self, pairs):
        for pair in pairs:
            self.read += 1
            self.most_ahead = max(self.most_ahead, self.read - self.written)
            yield pair


def test_the_reader_is_never_more_than_a_chunk_ahead_of_the_writer(models, tmp_path, monkeypatch):
    spy = Spy()
    json_sentence, align = output_module._json_sentence, Aligner.align

    def written(k, sentence):
        spy.written += 1
        return json_sentence(k, sentence)

    def aligned(self, src_lines, tgt_lines):
        spy.chunks.append(len(src_lines))
        return align(self, src_lines, tgt_lines)

    monkeypatch.setattr(output_module, "_json_sentence", written)
    monkeypatch.setattr(Aligner, "align", aligned)
    align_into(aligner(models), spy.pairs(PAIRS * 4), tmp_path / "out", chunk_lines=3, progress=False)
    assert spy.read == spy.written == 32
    assert spy.chunks == [3] * 10 + [2]  # the aligner sees a chunk at a time, never the text
    assert spy.most_ahead == 3  # whatever the input's length, one chunk is read ahead of what is written


UNPATCHED_ALIGN = Aligner.align  # the aligner's own method, whatever a test has patched in since


def recording_align(calls: list, stop_at: int | None = None, mid_chunk: bool = False):
    """``Aligner.align`` recording each chunk's source lines in ``calls`` and interrupted at the
    ``stop_at``-th chunk (:func:`tests.interrupting.recording`)."""
    return recording(UNPATCHED_ALIGN, calls, stop_at, mid_chunk)


@pytest.mark.parametrize("mid_chunk", [False, True], ids=["at-a-chunk-boundary", "mid-chunk"])
def test_a_stopped_run_resumes_at_its_first_unfinished_chunk(models, tmp_path, monkeypatch, mid_chunk):
    align_into(aligner(models), PAIRS, tmp_path / "whole", chunk_lines=2, progress=False)
    calls = []
    monkeypatch.setattr(Aligner, "align", recording_align(calls, stop_at=3, mid_chunk=mid_chunk))
    out = tmp_path / "stopped"
    with pytest.raises(KeyboardInterrupt):
        align_into(aligner(models), PAIRS, out, chunk_lines=2, progress=False)
    assert sorted(path.name for path in out.iterdir()) == [CHUNKS]  # no output half-written
    assert len(list((out / CHUNKS).glob("*.npz"))) == 2  # nor the chunk begun
    assert len(list((out / CHUNKS).iterdir())) == 4  # the two chunks and their seconds: no temporary
    calls.clear()
    monkeypatch.setattr(Aligner, "align", recording_align(calls))
    totals, real_progress = [], corpus_module.Progress
    monkeypatch.setattr(corpus_module, "Progress", lambda *args, **options: totals.append(options["total"]) or
                        real_progress(*args, **options))
    align_into(aligner(models), PAIRS, out, chunk_lines=2, progress=False, total=len(PAIRS))
    assert calls == [[source for source, _ in PAIRS[start:start + 2]] for start in (4, 6)]  # chunks 3 and 4 only
    assert totals == [4]  # the ETA counts down the pairs left, not those kept
    assert output_bytes(out) == output_bytes(tmp_path / "whole")
    assert not (out / CHUNKS).exists()


def test_a_chunk_is_aligned_again_when_its_pairs_or_the_settings_change(models, tmp_path, monkeypatch):
    out = tmp_path / "out"
    chunks = corpus_module.aligned_chunks(aligner(models), out / CHUNKS)
    keys = [chunks.key(PAIRS[:2]), chunks.key(PAIRS[2:4])]
    assert keys[0] != keys[1] and chunks.key(PAIRS[:2]) == keys[0]
    other = corpus_module.aligned_chunks(Aligner(models["forward"], AlignOptions(batch_size=1), "cpu"), out / CHUNKS)
    assert other.key(PAIRS[:2]) != keys[0]  # without the reverse model the alignments differ


def soft_sentences(count: int) -> list[SentenceAlignment]:
    """Pairs of every shape soft.npz holds: words in any script, an empty side, no links."""
    rng = np.random.default_rng(3)
    sentences = []
    for n in range(count):
        src, tgt = [f"wört{n}", "ß", "日本"][: n % 4], [f"w{n}", "x"][: (n + 1) % 3]
        links = [(i, j) for j in range(len(tgt)) for i in range(len(src)) if (i + j + n) % 2 == 0]
        sentences.append(SentenceAlignment(src, tgt, rng.random((len(tgt), len(src))), links))
    return sentences


def test_soft_npz_holds_pairs_in_blocks_whose_entries_do_not_grow_with_the_pairs(tmp_path):
    sentences = soft_sentences(11)
    for pairs, block_pairs in ((11, 4), (3, 4), (0, 4), (11, 1000)):
        path = tmp_path / f"{pairs}-{block_pairs}.npz"
        with open(path, "wb") as handle, output_module.SoftNpzWriter(handle, compress=True, block_pairs=block_pairs,
                                                                      matrix_dtype=np.float64) as writer:
            for sentence in sentences[:pairs]:
                writer.add(sentence)
            writer.close({"step": 7})
        with zipfile.ZipFile(path) as archive:  # six entries a block and the settings, whatever the pairs
            assert len(archive.namelist()) == 6 * -(-pairs // block_pairs) + 1
        read, settings = load_soft_npz(path)
        assert settings == {"step": 7} and len(read) == pairs
        for got, want in zip(read, sentences):
            assert (got.src_words, got.tgt_words, got.links) == (want.src_words, want.tgt_words, want.links)
            np.testing.assert_array_equal(got.matrix, want.matrix)


def test_soft_npz_of_the_layout_before_blocks_still_reads(tmp_path):
    sentences = soft_sentences(3)
    arrays = {"settings": np.array(json.dumps({"step": 1}))}
    for k, sentence in enumerate(sentences):
        arrays.update({f"matrix_{k}": sentence.matrix.astype(np.float32), f"links_{k}": np.array(
            sentence.links, dtype=np.int64).reshape(-1, 2), f"src_words_{k}": np.array(sentence.src_words, dtype=str),
            f"tgt_words_{k}": np.array(sentence.tgt_words, dtype=str)})
    np.savez(tmp_path / "old.npz", **arrays)
    read, settings = load_soft_npz(tmp_path / "old.npz")
    assert settings == {"step": 1} and [(s.src_words, s.tgt_words, s.links) for s in read] == [
        (s.src_words, s.tgt_words, s.links) for s in sentences]
    (tmp_path / "not.npz").write_bytes(b"not a zip")
    with pytest.raises(NmtError, match="not.npz: not a soft-alignment file written by nmt align"):
        load_soft_npz(tmp_path / "not.npz")


def test_gold_links_must_pair_with_the_input(models, tmp_path):
    short = tmp_path / "short.gold"
    short.write_text("0-0\n", encoding="utf-8")
    with pytest.raises(InputError, match="short.gold: has 1 lines but src goes on"):
        align_into(aligner(models), PAIRS, tmp_path / "a", gold_path=short, input_name="src", progress=False)
    long_ = tmp_path / "long.gold"
    long_.write_text("0-0\n" * 9, encoding="utf-8")
    with pytest.raises(InputError, match="long.gold: has 9 lines but src has 8"):
        align_into(aligner(models), PAIRS, tmp_path / "b", gold_path=long_, input_name="src", progress=False)
    with pytest.raises(NmtError, match="heatmap line 9 is out of range: there are 8 sentence pairs"):
        align_into(aligner(models), PAIRS, tmp_path / "c", HeatmapChoice(lines=(9,)), progress=False)
    for name in ("a", "b", "c"):
        assert not (tmp_path / name / "alignments.align").exists()


def test_cli_chunk_size_gives_the_same_files(models, tmp_path):
    root = models["root"]
    (root / "src8").write_text("".join(s + "\n" for s, _ in PAIRS), encoding="utf-8")
    (root / "tgt8").write_text("".join(t + "\n" for _, t in PAIRS), encoding="utf-8")
    for chunk in (1, 2000):
        result = CliRunner().invoke(cli, ["align", "--checkpoint", str(models["forward"]), "--src", str(root / "src8"),
                                          "--tgt", str(root / "tgt8"), "--out", str(tmp_path / str(chunk)),
                                          "--chunk-size", str(chunk), "--batch-size", "1", "--heatmaps", "20", "-q"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "aligned 8 pairs" in result.stderr
        assert "8 heatmap(s)" in result.stderr  # --heatmaps 20: as many as there are
    assert output_bytes(tmp_path / "1") == output_bytes(tmp_path / "2000")
    result = CliRunner().invoke(cli, ["align", "--checkpoint", str(models["forward"]), "--src", str(root / "src8"),
                                      "--tgt", str(root / "tgt8"), "--out", str(tmp_path / "hard"), "--no-soft",
                                      "--batch-size", "1", "-q"], catch_exceptions=False)
    assert result.exit_code == 0 and "alignments.align, settings.json, 0 heatmap(s)" in result.stderr
    assert sorted(path.name for path in (tmp_path / "hard").iterdir()) == ["alignments.align", "settings.json"]
    assert (tmp_path / "hard" / "alignments.align").read_bytes() == (tmp_path / "1" / "alignments.align").read_bytes()


# ---- nmt align bootstrap: the links stages ----------------------------------------------------------------------


class TrainingText:
    """What the bootstrap reads of a prepared directory: the cleaned training text."""

    def __init__(self, folder):
        self.folder = folder

    def text_path(self, split, side):
        return self.folder / f"{split}.{side}"


def test_bootstrap_links_stream_and_are_the_same_for_any_chunk_size(models, tmp_path, monkeypatch):
    from nmt_cli import textio
    from nmt_cli import bootstrap as bootstrap_module

    text = TrainingText(tmp_path / "prepared")
    text.folder.mkdir()
    pairs = PAIRS * 3
    text.text_path("train", "src").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    text.text_path("train", "tgt").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    read, align_calls, iter_lines, align = {}, [], textio.iter_lines, Aligner.align

    def spied_lines(path):  # the reader spy: lines read of each file so far
        for line in iter_lines(path):
            read[path] = read.get(path, 0) + 1
            yield line

    def spied_align(self, src_lines, tgt_lines):
        align_calls.append((len(src_lines), max(read.values())))
        return align(self, src_lines, tgt_lines)

    monkeypatch.setattr(textio, "iter_lines", spied_lines)
    monkeypatch.setattr(Aligner, "align", spied_align)
    written = {}
    for chunk in (1, 5, 5000):
        read.clear()
        align_calls.clear()
        target = tmp_path / f"links-{chunk}" / "train.align"
        assert bootstrap_module._align_into(aligner(models), bootstrap_module._training_pairs(text), target, None,
                                            chunk_lines=chunk) == (24, sum(len(line.split())
                                                                           for line in target.read_text().splitlines()))
        written[chunk] = target.read_bytes()
        assert not link_chunks(target).folder.exists()
        aligned = 0
        for size, lines_read in align_calls:  # when a chunk is aligned, no line past it has been read
            aligned += size
            assert size <= chunk and lines_read == aligned
    assert written[1] == written[5] == written[5000]
    whole = align(aligner(models), [s for s, _ in pairs], [t for _, t in pairs])
    assert [set(pair.sure) for pair in read_alignments(tmp_path / "links-1" / "train.align")] == [
        set(sentence.links) for sentence in whole]


@pytest.mark.parametrize("mid_chunk", [False, True], ids=["at-a-chunk-boundary", "mid-chunk"])
def test_an_interrupted_bootstrap_links_stage_aligns_only_what_it_had_not(models, tmp_path, monkeypatch, mid_chunk):
    from nmt_cli import bootstrap as bootstrap_module

    calls = []
    target = tmp_path / "links" / "train.align"
    monkeypatch.setattr(Aligner, "align", recording_align(calls, stop_at=2, mid_chunk=mid_chunk))
    with pytest.raises(KeyboardInterrupt):
        bootstrap_module._align_into(aligner(models), iter(PAIRS), target, None, chunk_lines=3)
    assert sorted(path.name for path in target.parent.iterdir()) == ["train.align.chunks"]  # nothing half-written
    assert len(list(link_chunks(target).folder.glob("*.align"))) == 1
    calls.clear()
    monkeypatch.setattr(Aligner, "align", recording_align(calls))
    assert bootstrap_module._align_into(aligner(models), iter(PAIRS), target, None, chunk_lines=3)[0] == 8
    assert calls == [[source for source, _ in PAIRS[start:start + 3]] for start in (3, 6)]  # the first was kept
    bootstrap_module._align_into(aligner(models), iter(PAIRS), tmp_path / "whole" / "train.align", None, chunk_lines=3)
    assert target.read_bytes() == (tmp_path / "whole" / "train.align").read_bytes()
    assert sorted(path.name for path in target.parent.iterdir()) == ["train.align"]

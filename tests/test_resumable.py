"""resumable.ChunkFolder: chunks kept by their items and settings, their seconds, what is left to
do, and a removal that deletes nothing it did not write (its users' resume tests are in
test_alignment_stream.py, test_shortlist.py and test_distill.py)."""

from __future__ import annotations

import io

import pytest

from nmt_cli.progress import Progress
from nmt_cli.resumable import ChunkFolder

ITEMS = [f"line {n}" for n in range(7)]


def write_items(chunk, handle):
    handle.write("".join(item + "\n" for item in chunk).encode("utf-8"))


def test_a_rerun_makes_only_the_chunks_not_kept_and_takes_their_seconds_from_the_run_before(tmp_path):
    folder = ChunkFolder(tmp_path / "chunks", {"setting": 1}, ".txt")
    assert folder.remaining(7, 3) == 7
    first = list(folder.results(ITEMS, 3, write_items))
    assert [(chunk.items, chunk.made) for chunk in first] == [(ITEMS[:3], True), (ITEMS[3:6], True), (ITEMS[6:], True)]
    assert all(chunk.seconds > 0 for chunk in first)
    assert first[1].path.read_text(encoding="utf-8") == "line 3\nline 4\nline 5\n"
    first[1].path.unlink()
    assert folder.remaining(7, 3) == 3
    counter = Progress("test", total=3, enabled=False)
    again = list(folder.results(ITEMS, 3, write_items, counter))
    assert [chunk.made for chunk in again] == [False, True, False] and counter.count == 3
    assert [chunk.seconds for chunk in again][::2] == [chunk.seconds for chunk in first][::2]  # recorded, not timed


def test_a_chunk_whose_items_or_settings_changed_is_made_again(tmp_path):
    folder = ChunkFolder(tmp_path / "chunks", {"setting": 1}, ".txt")
    list(folder.results(ITEMS, 3, write_items))
    changed = ITEMS[:4] + ["another line"] + ITEMS[5:]
    assert [chunk.made for chunk in folder.results(changed, 3, write_items)] == [False, True, False]
    other = ChunkFolder(tmp_path / "chunks", {"setting": 2}, ".txt")
    assert [chunk.made for chunk in other.results(ITEMS, 3, write_items)] == [True, True, True]


def test_an_interrupted_chunk_leaves_no_file_and_is_made_by_the_rerun(tmp_path):
    folder = ChunkFolder(tmp_path / "chunks", None, ".txt")

    def stops_midway(chunk, handle):
        write_items(chunk, handle)  # the chunk's bytes begun, as Ctrl-C would find them
        if chunk[0] == "line 3":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        list(folder.results(ITEMS, 3, stops_midway))
    names = sorted(path.name for path in folder.folder.iterdir())
    assert len(names) == 2 and names[0].startswith("00000000-") and names[1] == names[0] + ".seconds"
    made = [chunk.made for chunk in folder.results(ITEMS, 3, write_items)]
    assert made == [False, True, True]


def test_remove_deletes_its_chunks_and_nothing_else(tmp_path):
    folder = ChunkFolder(tmp_path / "chunks", None, ".txt")
    kept = list(folder.results(ITEMS, 3, write_items))
    dead_writer = folder.folder / f".{kept[0].path.name}.999999999.x1y2.tmp"  # what a killed run leaves
    dead_writer.write_bytes(b"half")
    mine = {folder.folder / "notes.txt": "mine", folder.folder / "00000000-notes.md": "mine too",
            folder.folder / "00000009-0123456789abcdef0123.npz": "another command's chunk"}
    for path, text in mine.items():
        path.write_text(text, encoding="utf-8")
    folder.remove()
    assert sorted(folder.folder.iterdir()) == sorted(mine)
    for path in mine:
        path.unlink()
    list(folder.results(ITEMS, 3, write_items))
    folder.remove()
    assert not folder.folder.exists()  # the folder too, once nothing else is in it
    ChunkFolder(tmp_path / "never made", None, ".txt").remove()  # nothing to remove: nothing happens


def test_progress_counts_the_items_made_now_against_what_was_left(tmp_path):
    folder = ChunkFolder(tmp_path / "chunks", None, ".txt")
    list(folder.results(ITEMS[:3], 3, write_items))
    stream = io.StringIO()
    with Progress("chunks", total=folder.remaining(7, 3), stream=stream, interval=0) as counter:
        list(folder.results(ITEMS, 3, write_items, counter))
    assert counter.total == 4 and counter.count == 4 and "chunks: 4 pairs" in stream.getvalue()

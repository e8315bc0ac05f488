"""Heatmap PNGs: written, decodable, sized by the number of words on each axis."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.image import imread

from nmt_cli.alignment.heatmap import save_heatmap
from nmt_cli.pharaoh import parse_links


def test_heatmap_png_is_written_with_sizes_following_the_words(tmp_path):
    small = np.full((2, 3), 1 / 3)
    save_heatmap(tmp_path / "small.png", small, ["a", "b", "c"], ["x", "y"], links=[(0, 0), (2, 1)])
    rng = np.random.default_rng(0)
    large = rng.dirichlet(np.ones(30), size=30)
    save_heatmap(tmp_path / "large.png", large, [f"s{i}" for i in range(30)], [f"t{i}" for i in range(30)],
                 gold=parse_links("0-0 1p1"), title="line 1")
    assert (tmp_path / "small.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    small_pixels, large_pixels = imread(tmp_path / "small.png"), imread(tmp_path / "large.png")
    assert small_pixels.shape[0] > 0 and small_pixels.shape[1] > 0
    assert large_pixels.shape[0] > 3 * small_pixels.shape[0]
    assert large_pixels.shape[1] > 3 * small_pixels.shape[1]
    assert list(tmp_path.glob(".*.tmp")) == []  # written atomically, nothing left behind


def test_heatmap_rejects_words_that_do_not_match_the_matrix(tmp_path):
    with pytest.raises(ValueError, match="2 target x 2 source"):
        save_heatmap(tmp_path / "bad.png", np.ones((2, 3)), ["a", "b"], ["x", "y"])
    assert not (tmp_path / "bad.png").exists()

"""The MRZ recogniser's training lines (processors/card/training/mrz_train.py), made without
torch: photographed and scanned documents, located and cut as the reader does."""

from __future__ import annotations

from processors.card.mrz.icao import ALPHABET
from processors.card.mrz.locate import LINE_INPUT_H
from processors.card.training.mrz_train import photo_line_samples


def test_scanned_training_documents_give_their_zone_lines_with_their_text():
    crops, texts = photo_line_samples(5, 3, scan_share=1.0)
    # three clean scans: every zone is found, two or three lines each
    assert 6 <= len(crops) == len(texts) <= 9
    for crop, text in zip(crops, texts, strict=True):
        assert crop.shape[0] == LINE_INPUT_H and crop.shape[1] > 10 * LINE_INPUT_H
        assert len(text) in (30, 36, 44) and set(text) <= set(ALPHABET)
    again = photo_line_samples(5, 3, scan_share=1.0)
    assert again[1] == texts  # seeded
    assert photo_line_samples(5, 3)[1] != texts  # photographed instead: other captures

"""``wirepipe dict train`` and ``dict list`` say one figure the same way; a compression that makes records larger
than they were serialized is flagged."""

from __future__ import annotations

import json

from wirepipe.dictionaries import Training, gain_words


def _training(raw: float, plain: float, shared: float) -> Training:
    return Training(b"d" * 1024, 7, 1600, 400, 3, raw, plain, shared)


def test_the_gain_train_prints_is_the_one_the_bucket_keeps_and_list_shows() -> None:
    # 1 - 53.8485 / 75.6 = 0.28771...: 28.8% once, rounded once, wherever it is shown
    t = _training(66.6, 75.6, 53.8485)
    assert t.gain == 0.288 and json.loads(json.dumps(t.report()))["gain"] == 0.288
    assert t.lines()[4].endswith("B/record  (28.8% smaller than zstd)")
    assert gain_words(t.report()["gain"]) == "28.8% smaller than zstd"  # what `dict list` prints


def test_zstd_larger_than_the_serialized_records_is_flagged() -> None:
    lines = _training(66.6, 75.6, 53.8485).lines(80)
    assert lines[2:] == ["  serialized              66.6 B/record",
                         "  zstd                    75.6 B/record  (13.5% LARGER than serialized)",
                         "  zstd + dictionary       53.8 B/record  (28.8% smaller than zstd)",
                         "note: plain zstd makes these records LARGER than serialized; only the dictionary",
                         "shrinks them"]
    both = _training(44.7, 53.7, 48.9).lines(80)
    assert both[3:] == ["  zstd                    53.7 B/record  (20.1% LARGER than serialized)",
                        "  zstd + dictionary       48.9 B/record  (8.9% smaller than zstd)",
                        "note: with the dictionary too, records come out 9.4% LARGER than serialized:",
                        "records this small gain nothing compressed one by one (send them uncompressed,",
                        "or several per message with pack)"]
    assert all(len(line) <= 80 for line in both)
    assert len(_training(300.0, 120.0, 80.0).lines(80)) == 5  # smaller both ways: no flag, no note

"""The offline metrics against brute-force definitions, on random data with ties."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.binary_metrics import accuracy, auc, binary_metrics, log_loss

scores = st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.5, 0.75, 0.9, 1.0]) | st.floats(0, 1)
examples = st.lists(st.tuples(st.integers(0, 1), scores), min_size=2, max_size=60)


def pairwise_auc(labels, probs):
    pos = [p for y, p in zip(labels, probs) if y]
    neg = [p for y, p in zip(labels, probs) if not y]
    wins = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


@settings(max_examples=200, deadline=None)
@given(examples)
def test_rank_auc_equals_pairwise_auc(data):
    labels = [y for y, _ in data]
    probs = [p for _, p in data]
    if 0 < sum(labels) < len(labels):
        assert auc(labels, probs) == pytest.approx(pairwise_auc(labels, probs), abs=1e-12)
    else:
        assert math.isnan(auc(labels, probs))


def test_known_values():
    labels = [0, 0, 1, 1]
    probs = [0.1, 0.4, 0.35, 0.8]
    assert auc(labels, probs) == 0.75
    assert accuracy(labels, probs) == 0.75          # 0.35 -> class 0
    expected = -(math.log(0.9) + math.log(0.6) + math.log(0.35) + math.log(0.8)) / 4
    assert log_loss(labels, probs) == pytest.approx(expected)
    assert log_loss([1], [0.0]) == pytest.approx(-math.log(1e-7))   # clipped, not inf
    m = binary_metrics(labels, probs)
    assert (m.examples, m.positives) == (4, 2)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="3 labels but 2"):
        auc([0, 1, 1], [0.1, 0.2])
    with pytest.raises(ValueError, match="0 or 1"):
        accuracy([0, 2], [0.1, 0.2])

"""Metrics of a binary classifier from labels and predicted probabilities, in plain Python.

AUC is the rank statistic (Mann-Whitney U): the probability that a random positive example
scores higher than a random negative one, ties counting one half. Sorting once makes it
O(n log n); tied scores get their average rank, so the value is exact, not a histogram
approximation like ``tf.metrics.auc``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

LOG_LOSS_EPS = 1e-7     # probabilities are clipped to [eps, 1 - eps] (as Keras does)
THRESHOLD = 0.5         # p > 0.5 is class 1 (as an Estimator's class_ids: argmax)


@dataclass
class BinaryMetrics:
    """A binary classifier's metrics over a set of examples."""

    examples: int
    positives: int
    auc: float
    accuracy: float
    log_loss: float

    def as_dict(self) -> dict[str, float]:
        return {"auc": self.auc, "accuracy": self.accuracy, "log_loss": self.log_loss,
                "examples": self.examples, "positives": self.positives}


def _check(labels: Sequence[int], scores: Sequence[float]) -> None:
    if len(labels) != len(scores):
        raise ValueError(f"{len(labels)} labels but {len(scores)} predictions")
    if not labels:
        raise ValueError("no examples")
    bad = [y for y in labels if y not in (0, 1)]
    if bad:
        raise ValueError(f"labels must be 0 or 1, found {bad[0]!r}")


def auc(labels: Sequence[int], scores: Sequence[float]) -> float:
    """Area under the ROC curve; NaN when only one class is present."""
    _check(labels, scores)
    pairs = sorted(zip(scores, labels))
    rank_sum_pos = 0.0
    i, n = 0, len(pairs)
    while i < n:
        j, tied_positives = i, 0
        while j < n and pairs[j][0] == pairs[i][0]:
            tied_positives += pairs[j][1]
            j += 1
        rank_sum_pos += tied_positives * (i + 1 + j) / 2   # ranks i+1..j, averaged
        i = j
    positives = sum(labels)
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return math.nan
    return (rank_sum_pos - positives * (positives + 1) / 2) / (positives * negatives)


def accuracy(labels: Sequence[int], scores: Sequence[float], threshold: float = THRESHOLD
             ) -> float:
    _check(labels, scores)
    return sum(int(p > threshold) == y for y, p in zip(labels, scores)) / len(labels)


def log_loss(labels: Sequence[int], scores: Sequence[float], eps: float = LOG_LOSS_EPS
             ) -> float:
    """Mean binary cross-entropy."""
    _check(labels, scores)
    total = 0.0
    for y, p in zip(labels, scores):
        p = min(max(p, eps), 1 - eps)
        total -= math.log(p) if y else math.log(1 - p)
    return total / len(labels)


def binary_metrics(labels: Sequence[int], scores: Sequence[float]) -> BinaryMetrics:
    labels = [int(y) for y in labels]
    scores = [float(p) for p in scores]
    return BinaryMetrics(examples=len(labels), positives=sum(labels), auc=auc(labels, scores),
                         accuracy=accuracy(labels, scores), log_loss=log_loss(labels, scores))

"""Synthetic click-through data for the examples: deterministic, tiny, fast, learnable.

One CSV row per impression: ``id`` (0..rows-1, unique), three numeric features, two
categorical ones and a binary ``label`` drawn from a known logistic model, so a linear
model reaches an AUC around 0.8. The same (rows, seed) always gives the same file.

    python examples/ctr_data.py data/ctr-train.csv --rows 20000 --seed 1
"""

from __future__ import annotations

import argparse
import math
import os
import random
import tempfile

COLUMNS = ("id", "age", "price", "hour", "device", "site", "label")
NUMERIC = ("age", "price", "hour")
DEVICES = ("mobile", "desktop", "tablet")
SITES = tuple(f"s{i}" for i in range(8))
_DEVICE_EFFECT = {"mobile": 0.8, "desktop": -0.6, "tablet": 0.1}
_SITE_EFFECT = {s: -1.2 + 2.4 * i / (len(SITES) - 1) for i, s in enumerate(SITES)}


def default_dir() -> str:
    """Where the examples keep the files: $TFCLUSTER_EXAMPLES_DATA (the tests point it out
    of the checkout), else data/ in the repository."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.environ.get("TFCLUSTER_EXAMPLES_DATA") or os.path.join(repo, "data")


def rows(count: int, seed: int):
    """The rows as tuples in COLUMNS order."""
    rng = random.Random(seed)
    for i in range(count):
        age, price, hour = rng.random(), rng.random(), rng.randrange(24) / 23
        device, site = rng.choice(DEVICES), rng.choice(SITES)
        logit = 2.5 * (age - 0.5) - 2.0 * (price - 0.5) + 0.6 * math.sin(6.283 * hour)
        logit += _DEVICE_EFFECT[device] + _SITE_EFFECT[site]
        label = int(rng.random() < 1 / (1 + math.exp(-logit)))
        yield (i, round(age, 5), round(price, 5), round(hour, 5), device, site, label)


def write_csv(path: str, count: int, seed: int) -> str:
    """Write the file atomically (several tasks may create it at once); return its path."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".ctr-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(",".join(COLUMNS) + "\n")
        for row in rows(count, seed):
            f.write(",".join(str(v) for v in row) + "\n")
    os.replace(tmp, path)
    return path


def ensure(data_dir: str, split: str, count: int, seed: int) -> str:
    """Path of ``ctr-SPLIT-COUNT-sSEED.csv`` in data_dir, generated when missing."""
    path = os.path.join(data_dir, f"ctr-{split}-{count}-s{seed}.csv")
    return path if os.path.exists(path) else write_csv(path, count, seed)


def read_csv(path: str):
    """tf.data dataset of (features dict, label) pairs, one element per row, in file order."""
    import tensorflow as tf

    types = [tf.int64, tf.float32, tf.float32, tf.float32, tf.string, tf.string, tf.int64]
    dataset = tf.data.experimental.CsvDataset(path, types, header=True)

    def to_pair(*cols):
        return dict(zip(COLUMNS[:-1], cols)), cols[-1]

    return dataset.map(to_pair)


def to_vector(features):
    """Dense float inputs for the TF2 examples: numeric features and one-hot categories."""
    import tensorflow as tf

    def one_hot(values, vocab):
        return tf.cast(tf.equal(tf.expand_dims(values, -1), tf.constant(vocab)), tf.float32)

    numeric = tf.stack([features[n] for n in NUMERIC], axis=-1)
    return tf.concat([numeric, one_hot(features["device"], DEVICES),
                      one_hot(features["site"], SITES)], axis=-1)


INPUT_WIDTH = len(NUMERIC) + len(DEVICES) + len(SITES)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path")
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    print(write_csv(a.path, a.rows, a.seed))


if __name__ == "__main__":
    main()

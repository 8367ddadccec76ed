"""Fit a tiny Keras model for a few epochs with the TensorBoard callback writing into
argv[1] (Keras' own layout: train/ and validation/), as a Keras user's job does."""

import sys

import numpy as np
import tensorflow as tf

log_dir = sys.argv[1]
x = np.random.RandomState(0).normal(size=(256, 4)).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(x, y, batch_size=32, epochs=4, validation_split=0.25, verbose=0,
          callbacks=[tf.keras.callbacks.TensorBoard(log_dir=log_dir)])

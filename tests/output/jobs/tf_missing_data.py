"""A user's TensorFlow 2.21 script that fails at once, inside TensorFlow, because of its own
mistake: it reads a data file that is not there (the line marked so). TensorFlow 2.21 prints
absl's and oneDNN's banners whatever TF_CPP_MIN_LOG_LEVEL says, so they are in the task's
last lines."""

import sys

import tensorflow as tf


def read_rows(path):
    return tf.io.gfile.GFile(path).read().splitlines()      # USER-MISTAKE: no such file


rows = read_rows(sys.argv[1])

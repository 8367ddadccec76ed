"""A user's TensorFlow 2.21 script that fails at once, inside TensorFlow, because of its own
mistake: it reads a data file that is not there (the line marked so).

TensorFlow 2.21 prints absl's and oneDNN's banners whatever TF_CPP_MIN_LOG_LEVEL says, just
before the first op, so they fall among the task's last lines; but whether it prints them
depends on the CPU (cpu_feature_guard speaks only of instructions the build does not use;
oneDNN's line needs a CPU it optimises for). So that the failure tail is checked against
the banners on every machine, the script writes them itself first, as TensorFlow 2.21 does
on an AVX2 machine (TensorFlow may add its own after them)."""

import sys

import tensorflow as tf

BANNERS = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    "I0000 00:00:1796286662.973971   15917 cpu_feature_guard.cc:227] This TensorFlow binary "
    "is optimized to use available CPU instructions in performance-critical operations.",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild "
    "TensorFlow with the appropriate compiler flags.",
    "I0000 00:00:1796286662.981121   15917 port.cc:153] oneDNN custom operations are on. You "
    "may see slightly different numerical results due to floating-point round-off errors "
    "from different computation orders. To turn them off, set the environment variable "
    "`TF_ENABLE_ONEDNN_OPTS=0`.",
)


def read_rows(path):
    return tf.io.gfile.GFile(path).read().splitlines()      # USER-MISTAKE: no such file


print("\n".join(BANNERS), file=sys.stderr, flush=True)
rows = read_rows(sys.argv[1])

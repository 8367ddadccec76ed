"""A bare TensorFlow server for its TF_CONFIG task (what a ps runs): serves until killed.
Prints ``tfjob-serving`` once it listens."""

import json
import os

import tensorflow as tf

config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
server = tf.distribute.Server(tf.train.ClusterSpec(config["cluster"]), job_name=task["type"],
                              task_index=task["index"], protocol="grpc", start=True)
print("tfjob-serving", flush=True)
server.join()

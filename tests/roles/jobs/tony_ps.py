"""A ps server on its own, TonY-style: the task comes from JOB_NAME and TASK_INDEX, the
cluster from the launcher's TFCLUSTER_PS_HOSTS / TFCLUSTER_WORKER_HOSTS."""

import os

import tensorflow.compat.v1 as tf

cluster = tf.train.ClusterSpec({"ps": os.environ["TFCLUSTER_PS_HOSTS"].split(","),
                                "worker": os.environ["TFCLUSTER_WORKER_HOSTS"].split(",")})
job, index = os.environ["JOB_NAME"], int(os.environ["TASK_INDEX"])
server = tf.train.Server(cluster, job_name=job, task_index=index)
print(f"tony-style {job} {index} serving", flush=True)
server.join()

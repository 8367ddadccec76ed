"""A TF1-style between-graph replicated trainer, as the classic ``distributed.py`` /
``mnist_replica.py`` examples are written: the cluster comes from --ps_hosts and
--worker_hosts, the task from --job_name and --task_index (no TF_CONFIG); worker 0 is the
chief; a ps serves until it is stopped. TensorFlow 2.15 through tf.compat.v1."""

import argparse

import tensorflow.compat.v1 as tf

p = argparse.ArgumentParser()
p.add_argument("--job_name", required=True, choices=["ps", "worker"])
p.add_argument("--task_index", type=int, required=True)
p.add_argument("--ps_hosts", required=True)
p.add_argument("--worker_hosts", required=True)
p.add_argument("--train_dir", required=True)
p.add_argument("--train_steps", type=int, default=200)
args = p.parse_args()

tf.disable_v2_behavior()
cluster = tf.train.ClusterSpec({"ps": args.ps_hosts.split(","),
                                "worker": args.worker_hosts.split(",")})
server = tf.train.Server(cluster, job_name=args.job_name, task_index=args.task_index)
if args.job_name == "ps":
    print(f"ps {args.task_index} serving at {cluster.task_address('ps', args.task_index)}",
          flush=True)
    server.join()

with tf.device(tf.train.replica_device_setter(
        worker_device=f"/job:worker/task:{args.task_index}", cluster=cluster)):
    global_step = tf.train.get_or_create_global_step()
    x = tf.random.normal([64, 4], seed=args.task_index)
    y = tf.reduce_sum(x, axis=1, keepdims=True)
    w = tf.get_variable("w", [4, 1], initializer=tf.zeros_initializer())
    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    train_op = tf.train.GradientDescentOptimizer(0.05).minimize(loss, global_step=global_step)

    init_op = tf.global_variables_initializer()
    saver = tf.train.Saver()

# As mnist_replica.py: worker 0 initializes the variables on the ps, the others wait for it;
# each worker talks only to the ps and to itself.
config = tf.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{args.task_index}"])
manager = tf.train.SessionManager(ready_op=tf.report_uninitialized_variables(),
                                   recovery_wait_secs=0.5)
chief = args.task_index == 0
if chief:
    sess = manager.prepare_session(server.target, init_op=init_op, config=config)
else:
    sess = manager.wait_for_session(server.target, config=config)
step, value = sess.run(global_step), float("nan")
while step < args.train_steps:
    _, step, value = sess.run([train_op, global_step, loss])
    if chief and step % 100 == 0:
        saver.save(sess, f"{args.train_dir}/model.ckpt", global_step=step)
if chief:
    saver.save(sess, f"{args.train_dir}/model.ckpt", global_step=sess.run(global_step))
print(f"worker {args.task_index} done at global step {step}, loss {value:.4f}", flush=True)

"""tfcluster orchestrator: training semantics (checkpoints, steps, termination, sharding,
evaluation). Never imports `launcher`, and imports TensorFlow only inside functions."""

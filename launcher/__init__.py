"""tfcluster launcher: cluster spec, TF_CONFIG, backends, CLI. Never imports TensorFlow."""

__version__ = "0.1.0"

"""Checks before anything starts: mistakes outside the spec (``environment``) and the shared
storage of model_dir (``storage_check``), one clear line each."""

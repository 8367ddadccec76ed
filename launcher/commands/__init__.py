"""The commands besides running a job, above the printers they use: ``launch list/status/
logs/cancel`` (``runs``), ``--detach`` (``detach``), ``launch report`` (``report``) and
``launch tensorboard RUN`` (``tensorboard``)."""

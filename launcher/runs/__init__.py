"""The run registry (``registry``: state.json per run), the commands that follow runs
(``commands``: launch list/status/logs/cancel) and ``--detach`` (``detach``)."""

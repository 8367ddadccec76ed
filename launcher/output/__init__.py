"""Everything the launcher shows a person: the console, the progress line, the closing
summary, the metrics table and a failed task's traceback."""

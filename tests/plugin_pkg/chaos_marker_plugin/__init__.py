"""A tiny chaos plugin: the ``marker`` fault writes a file into the run's checkpoint directory; the
``marker_written`` check judges, from the history, that every marker fault wrote a non-empty one."""

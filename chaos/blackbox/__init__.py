"""Black-box targets: a user's torchrun script, unchanged, with no probe imported.

chaos sees such a job only from outside: its worker processes (their pids and the ``RANK`` torchrun
put in their environment, :mod:`chaos.blackbox.workers`), each rank's output lines (torchrun's
``--tee`` files, :mod:`chaos.blackbox.logs`), its checkpoint files (:mod:`chaos.blackbox.files`) and
its exit codes. :mod:`chaos.blackbox.observer` turns these into history events (``start``,
``log_progress``, ``log_checkpoint_saved``, ``log_error``, ``checkpoint_change``, ``checkpoint_checked``)
with ``source: "blackbox"``; :mod:`chaos.blackbox.triggers` fires faults on a log line or a checkpoint
change; :mod:`chaos.blackbox.checks` judges what can be seen, and says ``unknown`` where it cannot tell.

This package's ``__init__`` imports nothing: :mod:`chaos.scenario` imports :mod:`chaos.blackbox.spec`.
"""

"""Black-box targets: a user's torchrun script, unchanged, with no probe imported.

chaos sees such a job only from outside: its worker processes (their pids and the ``RANK`` torchrun
put in their environment, :mod:`chaos.observe.procs`), each rank's output lines (torchrun's
``--tee`` files, :mod:`chaos.observe.logs`), its checkpoint files (:mod:`chaos.observe.files`) and
its exit codes. :mod:`chaos.observe.observer` turns these into history events (``start``,
``log_progress``, ``log_checkpoint_saved``, ``log_error``, ``checkpoint_change``, ``checkpoint_checked``)
with ``source: "blackbox"``; :mod:`chaos.observe.triggers` fires faults on a log line or a checkpoint
change; :mod:`chaos.checks.blackbox` judges what can be seen, and says ``unknown`` where it cannot tell.

This package's ``__init__`` imports nothing: :mod:`chaos.scenario` imports :mod:`chaos.scenario.blackbox`.
"""

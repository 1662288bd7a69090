"""Adapters that let a job trained through a framework report to the probe without a line of its own
training loop changed: ``lightning`` (a ``Callback``) and ``accelerate`` (hooks around an
``Accelerator``). Each imports only the probe and its framework, and is a no-op outside a chaos run
(no ``CHAOS_RUN_DIR``), so a job keeps them in its code for good."""

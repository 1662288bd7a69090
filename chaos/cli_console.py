"""rich's :class:`~rich.console.Console` as the ``chaos`` command prints with it.

rich meets a reader that went away (``chaos list | head -1``) by exiting 1 (``Console.on_broken_pipe``),
the code of a failed check. Here it is a :class:`BrokenPipeError`, which :func:`chaos.cli.main` turns into
141, as a shell reports SIGPIPE."""

from __future__ import annotations

import errno

from rich.console import Console


class CliConsole(Console):
    """A Console whose closed pipe raises :class:`BrokenPipeError` (rich's documented hook for it)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more to write to a reader that is gone
        raise BrokenPipeError(errno.EPIPE, "the reader of chaos's output went away")


__all__ = ["CliConsole"]

"""Generated bad input through the CLI's entry point: the harness, the input strategies, the suite's share."""

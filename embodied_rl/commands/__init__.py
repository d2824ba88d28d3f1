"""Implementations of the CLI's subcommands (``embodied_rl/cli.py`` parses arguments and dispatches)."""

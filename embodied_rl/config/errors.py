"""The error every bad user input turns into: one line, exit code 2."""


class ConfigError(ValueError):
    """A configuration key, value or argument a user must fix; ``str(error)`` is the one line to print."""

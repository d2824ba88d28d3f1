"""Errors the task layer raises for problems a user can fix (bad names, missing assets, no Vulkan)."""


class TaskConfigError(ValueError):
    """A task name, option or environment setup that cannot work; the message is one line for the user."""


class SimulatorUnavailableError(TaskConfigError):
    """The simulator cannot start on this machine (e.g. no Vulkan device for SAPIEN)."""

"""One error type for bad input: configuration, data files, checkpoints, devices.

The CLI turns a DeaMoEError into a single line on stderr and exit status 2, so every message
must name the key, file, row or device at fault.
"""


class DeaMoEError(Exception):
    """Bad input that a user can fix; the message is one line naming what is wrong."""


class ConfigError(DeaMoEError, ValueError):
    """A configuration field has a wrong name, type or value."""


class DataError(DeaMoEError):
    """A data file is missing, empty or malformed."""

"""The one base class for user-facing errors: the CLI prints its message on one line and exits 2."""


class CollsynthError(ValueError):
    """Bad input or an impossible request; the message names the problem and the fix."""

"""The one exception users see as a message rather than a traceback."""


class UserError(Exception):
    """Bad input or a missing prerequisite: one line naming the input and the fix; exit code 2."""

"""User-facing errors: one line naming the problem and the fix, printed without a traceback."""


class UserError(Exception):
    """Bad input or environment. The CLI prints ``error: <message>`` and exits with status 2."""

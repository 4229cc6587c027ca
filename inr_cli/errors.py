"""Errors that reach the user as one line on stderr and an exit code."""

EXIT_RUNTIME = 1
EXIT_USAGE = 2


class InrError(Exception):
    """A failure the user can act on; the message is the whole story."""

    exit_code = EXIT_RUNTIME


class UsageError(InrError):
    """Bad option, bad config or bad value: exit code 2."""

    exit_code = EXIT_USAGE

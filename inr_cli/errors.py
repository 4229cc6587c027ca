"""Errors that reach the user as one line on stderr and an exit code."""

EXIT_RUNTIME = 1
EXIT_USAGE = 2


class InrError(Exception):
    """A failure the user can act on; the message is the whole story."""

    exit_code = EXIT_RUNTIME


class UsageError(InrError):
    """Bad option, bad config or bad value: exit code 2."""

    exit_code = EXIT_USAGE


class WriteError(InrError, OSError):
    """A file that could not be written (a read-only folder, a full disk, a device that refuses it),
    as one line that names it. An OSError too, so that code handling a failed write goes on doing so."""

    def __init__(self, message: str, errno: int | None = None, strerror: str | None = None):
        OSError.__init__(self, errno, strerror)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # one crossing a process (a Ray task) keeps its message
        return type(self), (self.message, self.errno, self.strerror)

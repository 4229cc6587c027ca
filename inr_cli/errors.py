"""Errors that reach the user as one line on stderr and an exit code."""

EXIT_RUNTIME = 1
EXIT_USAGE = 2


class InrError(Exception):
    """A failure the user can act on; the message is the whole story."""

    exit_code = EXIT_RUNTIME


class UsageError(InrError):
    """Bad option, bad config or bad value: exit code 2."""

    exit_code = EXIT_USAGE


class FileError(InrError, OSError):
    """A file or folder the system refused (a name longer than it takes, a folder it may not look
    into), as one line that names it. An OSError too, so that code handling one goes on doing so."""

    def __init__(self, message: str, errno: int | None = None, strerror: str | None = None):
        OSError.__init__(self, errno, strerror)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):  # one crossing a process (a Ray task) keeps its message
        return type(self), (self.message, self.errno, self.strerror)


def system_refusal(exc: OSError) -> str:
    """The one line for what the system refused that no reader named (a full disk, a read-only folder,
    a name too long): the file, then the system's words."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"{where}{exc.strerror or exc}"


class WriteError(FileError):
    """A file that could not be written (a read-only folder, a full disk, a device that refuses it),
    as one line that names it."""


# From Python, a bad argument is an InrError that is also the built-in error a Python user catches
# for it (inr_cli/arguments.py checks them at the API's boundary).
class ArgumentTypeError(UsageError, TypeError):
    """An argument of a type the function does not take (a number where a path goes)."""


class ArgumentValueError(UsageError, ValueError):
    """An argument of the right type and a value the function does not take (a share above 1)."""


class IndexOutOfRange(UsageError, IndexError):
    """An index past the end of a set or a view."""


class OutOfMemory(InrError, MemoryError):
    """The machine ran out of memory after the estimate let the work begin (another program took it,
    or a limit the estimate does not see)."""


OUT_OF_MEMORY = ("out of memory: the machine had less free than inr's estimate said, or another program took it; "
                 "lower the size (--size), the batch (--batch-size), the network (--hidden) or the hash grid "
                 "(--hash-log2-size, --hash-levels, --hash-max-res)")


class NoSuchName(InrError, KeyError):
    """A name the set does not hold."""

    def __str__(self) -> str:  # KeyError's own would quote the message
        return str(self.args[0]) if self.args else ""

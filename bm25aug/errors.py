"""User-facing errors: one line naming the problem and the fix, printed without a traceback, and how
the command line ends on an error of the system (a full disk, a reader that closed the pipe)."""

import errno
import os
import select
import sys


class UserError(Exception):
    """Bad input or environment. The CLI prints ``error: <message>`` and exits with status 2."""


class Unavailable(UserError):
    """A service a request needs is down, or the index it reads changed under it: not the caller's
    fault. The CLI exits with status 2 as for any ``UserError``; the server answers 503 with
    ``Retry-After`` (``retry_after`` seconds) and ``/health`` reports it."""

    def __init__(self, message: str, retry_after: int = 5):
        super().__init__(message)
        self.retry_after = retry_after


def os_error_message(e: OSError) -> str:
    """An ``OSError`` that reached the command line as one line: what failed, on which file when
    the system names one, and the fix that fits its cause."""
    fixes = {errno.ENOSPC: "free space on that disk, or write somewhere else",
             errno.EDQUOT: "free space within your quota, or write somewhere else",
             errno.ENOENT: "check the path: no such file or folder",
             errno.EISDIR: "pass a file, not a folder",
             errno.ENOTDIR: "check the path: a part of it is a file, not a folder",
             errno.EACCES: "check the permissions of that path, or use another one",
             errno.EPERM: "check the permissions of that path, or use another one",
             errno.EROFS: "write to a disk that is not read-only",
             errno.EMFILE: "raise the open-file limit (ulimit -n) or close other programs"}
    where = f" ({e.filename})" if e.filename else ""
    return f"{e.strerror or e}{where}; fix: {fixes.get(e.errno, 'check that path: free space, permissions')}"


def stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (poll reports an error on it)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (OSError, ValueError):
        return False


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's own flush at exit finds no broken pipe to report."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass

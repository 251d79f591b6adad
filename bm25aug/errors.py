"""User-facing errors: one line naming the problem and the fix, printed without a traceback."""


class UserError(Exception):
    """Bad input or environment. The CLI prints ``error: <message>`` and exits with status 2."""


def os_error_message(e: OSError) -> str:
    """An ``OSError`` that reached the command line as one line: what failed, on which file when
    the system names one, and the fix that fits its cause."""
    import errno

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

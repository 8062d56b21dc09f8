"""Writing a report or a bundle where another user may have planted a link.

kpdoctor runs as root, and ``-o /tmp/report.json`` names a file in a folder every user can write:
a link planted there (to ``/etc/shadow``, to a cron file) must not make root write through it. So
a file is never opened by its name: it is created under a fresh random name in the same folder
(``O_CREAT|O_EXCL|O_NOFOLLOW``: it cannot already exist, nor be a link), written, and renamed over
the name, which replaces a link itself and never its target. A reader never sees half a file.

Links that root or this user made are followed (a user's own ``report.json -> reports/r.json``
keeps its link); another user's link is replaced. A name that is a stream (``/dev/stdout``,
``/dev/null``, a FIFO a pipeline made) is written to as it is: a stream has no content to replace,
and renaming over ``/dev/stdout`` would replace the device's link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

_FILE_MODE = 0o666  # as open() would create it, less the umask
MAX_LINKS = 40


@contextlib.contextmanager
def replacing(dest: Path, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file to write; on a clean exit it becomes ``dest`` (see the module docstring).

    ``mode``: the file's permissions (default: 0o666 less the umask); ``0o600`` for a bundle."""
    where, stream = _where(dest)
    if stream:
        with open(where, "wb", buffering=0) as fh:  # a device, FIFO or descriptor, opened as such
            yield fh
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{where.name}.", suffix=".partial", dir=where.parent)
    try:
        os.fchmod(fd, _umasked() if mode is None else mode)
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, where)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_file(dest: Path, data: bytes, mode: int | None = None) -> None:
    """``data`` as ``dest``, written by :func:`replacing`."""
    with replacing(dest, mode) as fh:
        fh.write(data)


def create_folder(dest: Path) -> Callable[[str, bytes], None]:
    """Make ``dest`` a private folder (new, or an existing empty one that is not a link) and return
    a writer of files inside it, each created fresh (``O_EXCL|O_NOFOLLOW``), never through a link."""
    try:
        os.mkdir(dest, 0o700)
    except FileExistsError:
        st = os.lstat(dest)
        if not stat.S_ISDIR(st.st_mode):
            raise OSError(f"{dest} is not a folder (a link or a file is not written through)") from None
        if any(os.scandir(dest)):
            raise OSError(f"{dest} is not empty") from None
    root = Path(dest)

    def put(rel: str, data: bytes) -> None:
        parts = [p for p in rel.split("/") if p]
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for part in parts[:-1]:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o700, dir_fd=fd)
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = sub
            out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
            with os.fdopen(out, "wb") as fh:
                fh.write(data)
        finally:
            os.close(fd)

    return put


def _where(dest: Path) -> tuple[Path, bool]:
    """Where writing ``dest`` writes, and whether that is a stream: links root or this user made
    are followed (``/dev/stdout``, a user's own ``~/report.json -> reports/r.json``), another
    user's link is where the new file goes (replacing the link); /proc and /dev/fd names are the
    kernel's own (``/proc/self/fd/1``), written as they are."""
    path = str(dest)
    for _ in range(MAX_LINKS):
        if path.startswith(("/proc/", "/dev/fd/")):
            return Path(path), True
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return Path(path), False
        if not stat.S_ISLNK(st.st_mode):
            streams = (stat.S_ISCHR, stat.S_ISFIFO, stat.S_ISSOCK, stat.S_ISBLK)
            return Path(path), any(test(st.st_mode) for test in streams)
        if st.st_uid not in (0, os.geteuid()):
            return Path(path), False
        path = os.path.join(os.path.dirname(path), os.readlink(path))
    raise OSError(errno.ELOOP, f"{dest}: too many levels of links")


def _umasked() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return _FILE_MODE & ~mask

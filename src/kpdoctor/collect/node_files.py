"""Reading the node's files without being led astray by what is at their paths.

The collector runs as root on a node that may be damaged or hostile: where kube-proxy's Pod log
should be there may be a link to a removed container's log (normal after a runtime change), a
link out of the node's root (``--host-root /host``: an absolute link means the node's ``/``, not
the collector's), a FIFO (opening it blocks, reading it never ends), a device (``/dev/zero`` never
ends), a socket or a directory. So every path is resolved one component at a time from a
descriptor of the node's root, each component opened with ``O_NOFOLLOW`` and every link followed
by hand *inside* that root (``..`` stops at it, as the kernel's ``RESOLVE_IN_ROOT`` does); the last
component is first only named (``O_PATH``: opening some devices does something) and opened for
reading, ``O_NONBLOCK``, only when ``fstat`` says it is a regular file. Reads are
bounded in bytes and by a deadline. Every failure is a :class:`NodeFileError` with a one-line
reason, for the manifest's list of what was not collected: never an exception out of the run.
"""

from __future__ import annotations

import errno
import os
import stat
import time

MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC  # names the file without opening it (no device is opened)
_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20  # /proc and /sys files refuse one huge read (ENOMEM)

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NodeFileError(Exception):
    """Why a node file was not read, as one line (``/x is a FIFO: not read``)."""


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_in_root(root: str, inside: str) -> int:
    """A descriptor of the regular file ``inside`` (a path on the node) with every link resolved
    within ``root``; raises :class:`NodeFileError` for anything else."""
    fds: list[int] = []  # the directories walked, root first (".." pops one, never the root)
    try:
        try:
            fds.append(os.open(root, _DIR))
        except OSError as exc:
            raise NodeFileError(f"{inside}: the node root {root} cannot be opened ({exc.strerror})") from None
        parts = [p for p in inside.split("/") if p not in ("", ".")]
        links, via = 0, ""
        while parts:
            part = parts.pop(0)
            if part == "..":
                if len(fds) > 1:
                    os.close(fds.pop())
                continue
            last = not parts
            try:
                fd = os.open(part, _PATH if last else _DIR, dir_fd=fds[-1])
                if last and stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH|O_NOFOLLOW names the link itself
                    os.close(fd)
                    raise OSError(errno.ELOOP, "a link")
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    target = _link(part, fds[-1])
                    if target is None:
                        if exc.errno == errno.ENOTDIR:
                            raise NodeFileError(f"{inside}: {part} is not a directory") from None
                        raise
                    links += 1
                    if links > MAX_LINKS:
                        raise NodeFileError(f"{inside} is a loop of links: not read") from None
                    via = via or target
                    if target.startswith("/"):
                        while len(fds) > 1:
                            os.close(fds.pop())
                    parts = [p for p in target.split("/") if p not in ("", ".")] + parts
                    continue
                if exc.errno == errno.ENOENT:
                    gone = f"is a link to {via}, which does not exist" if via else "does not exist"
                    raise NodeFileError(f"{inside} {gone}") from None
                raise NodeFileError(f"cannot read {inside}: {exc.strerror or exc}") from None
            if last:
                try:
                    mode = os.fstat(fd).st_mode
                    if not stat.S_ISREG(mode):
                        raise NodeFileError(f"{inside} is {file_kind(mode)}: not read")
                    try:  # the very file named, opened for reading through its descriptor
                        return os.open(f"/proc/self/fd/{fd}", _FILE)
                    except OSError as exc:
                        raise NodeFileError(f"cannot read {inside}: {exc.strerror or exc}") from None
                finally:
                    os.close(fd)
            fds.append(fd)
        raise NodeFileError(f"{inside} is a directory: not read")
    finally:
        for fd in fds:
            os.close(fd)


def _link(name: str, dir_fd: int) -> str | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def size_text(n: int) -> str:
    """A size as a note says it: whole MiB when it is at least one, else bytes."""
    return f"{n // 1024**2} MiB" if n >= 1024**2 else f"{n:,} bytes"


def tail_note(limit: int, size: int) -> str:
    """What a log read from its end left out."""
    return f"last {size_text(limit)} of {size_text(size)}"


def read_node_file(
    root: str, inside: str, limit: int, *, tail: bool = False, deadline: float | None = None
) -> tuple[bytes, str]:
    """(content, note) of the node file ``inside``: at most ``limit`` bytes, the last ones with
    ``tail`` (a log; the cut first line dropped), until ``deadline`` (``time.monotonic()``).

    The note says what was left out ("" when nothing was)."""
    fd = open_in_root(root, inside)
    try:
        note = ""
        if tail:
            size = os.fstat(fd).st_size
            if size > limit:
                os.lseek(fd, size - limit, os.SEEK_SET)
                note = tail_note(limit, size)
        chunks, got = [], 0
        want = limit if tail else limit + 1
        while got < want:
            if deadline is not None and time.monotonic() > deadline:
                note = f"cut after {got} bytes: the collection's time bound was reached"
                break
            try:
                chunk = os.read(fd, min(_CHUNK, want - got))
            except BlockingIOError:  # a regular file never says this; a stacked filesystem might
                break
            except OSError as exc:
                raise NodeFileError(f"cannot read {inside}: {exc.strerror or exc}") from None
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        if tail and note.startswith("last"):
            data = data.split(b"\n", 1)[1] if b"\n" in data else data  # the partial first line
        elif not tail and len(data) > limit:
            data, note = data[:limit], f"first {limit} bytes only"
        return data, note
    finally:
        os.close(fd)


def resolve_in_root(root: str, path: str, hops: int = 40) -> str | None:
    """``path`` (absolute, as seen inside ``root``) with every symlink followed *inside* ``root``,
    as the path seen inside ``root``; None if it does not exist or loops."""
    parts = [p for p in path.split("/") if p]
    done: list[str] = []
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, part)
        if os.path.islink(here):
            hops -= 1
            if hops < 0:
                return None
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p] + parts
            continue
        if not os.path.lexists(here):
            return None
        done.append(part)
    return "/" + "/".join(done)


def node_text(root: str, inside: str, limit: int = 4 * 1024**2) -> str | None:
    """A small node file as text (``/proc/PID/status``, ``/proc/modules``); None if not read."""
    try:
        return read_node_file(root, inside, limit)[0].decode("utf-8", "replace")
    except NodeFileError:
        return None


def resolve_dir(root: str, inside: str) -> str | None:
    """The directory ``inside``, its links resolved within ``root``, as this process reaches it
    (for listing it); None when there is no directory there."""
    found = resolve_in_root(root, inside)
    if found is None:
        return None
    path = os.path.join(root, found.lstrip("/")) if root != "/" else found
    try:
        return path if stat.S_ISDIR(os.lstat(path).st_mode) else None
    except OSError:
        return None

"""Run the parts of a large job (a verification, a log scan) on every core, by forking.

Forked children see what the caller had built before forking without copying it (a
verification forks before reading the evidence: each process reads it itself). The calling
process runs the first part itself instead of waiting idle (on a two-core node that halves the
forks and the data sent back), :class:`Tickets` hands out the pieces of the work to whichever
process is free, and a child that fails has its part re-run here, so the result never depends
on whether forking worked."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
from collections.abc import Callable
from typing import Any

_CHUNK = 1 << 20
_TICKET = 2  # bytes per ticket number
MAX_TICKETS = 8192  # 16 KiB of numbers: a pipe takes them all without blocking


def default_workers() -> int:
    """CPUs this process may use (``KPDOCTOR_WORKERS`` overrides; 1 disables forking)."""
    env = os.environ.get("KPDOCTOR_WORKERS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cpus, 8)


def can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(os, "waitpid")


def workers_for(size: int, min_bytes: int, workers: int | None = None) -> int:
    """How many processes a job over ``size`` bytes of input should use: forking pays only for
    inputs of ``min_bytes`` and more (below, the fork and the results sent back cost more than
    the second core gives), where the machine has more than one core and can fork."""
    n = default_workers() if workers is None else workers
    if n <= 1 or size < min_bytes or not can_fork():
        return 1
    return n


def run_parts(parts: list[Callable[[], Any]]) -> list[Any]:
    """``[p() for p in parts]``, with parts[1:] in forked children (their results pickled back).

    Only call this where ``parts[1:]`` are pure computations: a child exits without running
    ``atexit`` handlers or flushing files it inherited."""
    children: list[tuple[int, int] | None] = []
    for part in parts[1:]:
        children.append(_spawn(part))
    waiting = [c for c in children if c is not None]  # not yet collected: their pipes are open
    try:
        results = [parts[0]()]
        for part, child in zip(parts[1:], children, strict=True):
            if child is not None:
                waiting.remove(child)  # _collect closes its pipe, whatever happens
            got = _collect(child) if child is not None else None
            results.append(got[0] if got is not None else part())
    except BaseException:  # interrupted (--timeout, Ctrl-C) or failed: no child outlives the caller
        for pid, r in waiting:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            os.close(r)
            _reap(pid)
        raise
    return results


def _spawn(part: Callable[[], Any]) -> tuple[int, int] | None:
    try:
        r, w = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # the child: compute, send, leave without touching the parent's state
        code = 1
        try:
            os.close(r)
            data = pickle.dumps(part(), protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(data)
            while view:
                view = view[os.write(w, view[:_CHUNK]) :]
            code = 0
            # the end of the result now, not after the kernel has freed this process's memory
            # (a tenth of a second for a large node, which the caller would spend waiting)
            os.close(w)
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _collect(child: tuple[int, int]) -> tuple[Any] | None:
    """The child's result (in a 1-tuple), or None if it failed (it sent no complete result)."""
    pid, r = child
    chunks = []
    try:
        while True:
            b = os.read(r, _CHUNK)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(r)
    # reaped in the background: the child may still be giving its memory back
    threading.Thread(target=_reap, args=(pid,), daemon=True).start()
    try:
        return (pickle.loads(b"".join(chunks)),)
    except (pickle.UnpicklingError, EOFError, ValueError):
        return None


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


class Tickets:
    """Numbered pieces of one job, handed out to the forked processes as each asks for the next,
    so a process slowed down (a busy core, a slower part of the data) simply takes fewer and
    none waits for another. The numbers are written into a pipe before forking; every process
    reads them from it, and a read of two bytes from a pipe is atomic."""

    def __init__(self, count: int) -> None:
        if not 0 < count <= MAX_TICKETS:
            raise ValueError(f"between 1 and {MAX_TICKETS} tickets, not {count}")
        self.count = count
        self._r, w = os.pipe()
        try:
            os.write(w, b"".join(i.to_bytes(_TICKET, "big") for i in range(count)))
        finally:
            os.close(w)  # so that an emptied pipe reads as the end

    def take(self) -> int | None:
        """The next piece's number, or None when all are taken."""
        got = os.read(self._r, _TICKET)
        return int.from_bytes(got, "big") if len(got) == _TICKET else None

    def close(self) -> None:
        os.close(self._r)

"""Run the parts of a large job (a verification, a log scan) on every core, by forking.

Forked children see the parsed rules, the cluster objects and the cases without copying them.
The calling process runs the first part itself instead of waiting idle (on a two-core node that
halves the forks and the data sent back), and a child that fails has its part re-run here, so
the result never depends on whether forking worked.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

_CHUNK = 1 << 20


def default_workers() -> int:
    """CPUs this process may use (``KPDOCTOR_WORKERS`` overrides; 1 disables forking)."""
    env = os.environ.get("KPDOCTOR_WORKERS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cpus, 8)


def can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(os, "waitpid")


def run_parts(parts: list[Callable[[], Any]]) -> list[Any]:
    """``[p() for p in parts]``, with parts[1:] in forked children (their results pickled back).

    Only call this where ``parts[1:]`` are pure computations: a child exits without running
    ``atexit`` handlers or flushing files it inherited."""
    children: list[tuple[int, int] | None] = []
    for part in parts[1:]:
        children.append(_spawn(part))
    results = [parts[0]()]
    for part, child in zip(parts[1:], children, strict=True):
        got = _collect(child) if child is not None else None
        results.append(got[0] if got is not None else part())
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
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _collect(child: tuple[int, int]) -> tuple[Any] | None:
    """The child's result (in a 1-tuple), or None if it failed."""
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
    _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    try:
        return (pickle.loads(b"".join(chunks)),)
    except (pickle.UnpicklingError, EOFError, ValueError):
        return None

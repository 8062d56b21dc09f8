"""Memo tables that live for one run.

Parsing and evaluating a node's rules meets the same strings again and again (an address, a port
range, a rule's citation): the modules that do keep a table of what they worked out. Those tables
belong to the run, not to the process: the pipeline empties them when a run ends
(:func:`clear`), so a process that runs kpdoctor again and again (the node agent, a library user)
does not keep every address it ever saw, nor the memory those objects pin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_TABLES: list[dict[Any, Any]] = []
_CACHED: list[Any] = []


def table() -> dict[Any, Any]:
    """A new memo table, emptied at the end of every run."""
    t: dict[Any, Any] = {}
    _TABLES.append(t)
    return t


def cached(maxsize: int) -> Callable[[F], F]:
    """``functools.lru_cache`` whose entries are dropped at the end of every run."""

    def deco(fn: F) -> F:
        wrapped = functools.lru_cache(maxsize=maxsize)(fn)
        _CACHED.append(wrapped)
        return wrapped  # type: ignore[return-value]

    return deco


def clear() -> None:
    """Forget everything the run memoised (called by the pipeline when a run ends)."""
    for t in _TABLES:
        t.clear()
    for fn in _CACHED:
        fn.cache_clear()


def size() -> int:
    """Entries held across every table (tests: a finished run leaves none)."""
    return sum(len(t) for t in _TABLES) + sum(int(fn.cache_info().currsize) for fn in _CACHED)

"""Regular expressions compiled when first used, not when their module is imported.

kpdoctor's modules hold some 430 patterns at module level (a parser's line shapes, a check's
message texts). Compiling them all was a fifth of every run's start-up (0.08 of 0.37 s of
imports), which is most of what a small ``diagnose`` costs, and a run uses a few dozen of them.
A pattern made here compiles on its first use; after that its methods are the compiled
pattern's own, looked up without any indirection (a parser's loop pays nothing).
``compile_all`` compiles every one: the test suite checks them all that way, so a broken
pattern still fails there, not at a user's first use.
"""

from __future__ import annotations

import re
from typing import Any, AnyStr, cast

# what a pattern's users read of it: its methods and attributes, taken from the compiled
# pattern into the instance at the first use (an instance attribute wins over __getattr__)
_TAKEN = (
    "match", "search", "fullmatch", "finditer", "findall", "sub", "subn", "split", "scanner",
    "pattern", "flags", "groups", "groupindex",
)  # fmt: skip

_MADE: list[_Lazy] = []


class _Lazy:
    """A pattern not compiled yet; it becomes one on its first use."""

    def __init__(self, pattern: str | bytes, flags: int) -> None:
        self.__dict__["_args"] = (pattern, flags)

    def __getattr__(self, name: str) -> Any:
        compiled = re.compile(*self.__dict__["_args"])
        for attr in _TAKEN:
            self.__dict__[attr] = getattr(compiled, attr)
        return getattr(compiled, name)

    def __repr__(self) -> str:
        pattern, flags = self.__dict__["_args"]
        return f"lazy_re.compile({pattern!r}, {flags})"


def compile(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(pattern, flags)``, compiled at the first use (see the module docstring)."""
    lazy = _Lazy(pattern, flags)
    _MADE.append(lazy)
    return cast("re.Pattern[AnyStr]", lazy)


def compile_all() -> int:
    """Compile every pattern made so far (a broken one raises ``re.error``); how many."""
    for lazy in _MADE:
        getattr(lazy, "pattern")  # noqa: B009  # the first use compiles it
    return len(_MADE)

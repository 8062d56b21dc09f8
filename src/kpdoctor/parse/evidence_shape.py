"""What one kind of command output looks like, declared once, by the module that reads it.

A parser module that reads a kind of evidence line by line declares its :class:`EvidenceShape`:
the artifact kind, the lines only that output prints (they type a run of lines in a paste:
``bundle.segments``), the other lines it prints around them, how a whole text is recognised
(``bundle.sniff``), its parser (what the facts read: ``Facts.records``, each record cited at its
line) and a few real lines of it (what the registry's test reads). ``parse.shapes.REGISTERED``
lists the shapes: a new one is its parser module, one line there, and its ``Kind``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from kpdoctor.bundle.artifacts import Kind


class Record(Protocol):
    """What a shape's parser gives per line read: the line's number in the user's file and its text."""

    @property
    def line(self) -> int: ...

    @property
    def text(self) -> str: ...


R = TypeVar("R", bound=Record, covariant=True)


def mostly(lines: list[str], *rows: re.Pattern[str], at_least: re.Pattern[str] | None = None) -> bool:
    """Do 60% of the non-empty lines match one of ``rows`` (and one line ``at_least``, else any
    row)? Grep'd output keeps a few other lines: the command, a "--", a header left in."""
    ours = [ln for ln in lines if any(rx.match(ln) for rx in rows)]
    key = sum(1 for ln in ours if at_least.match(ln)) if at_least is not None else len(ours)
    return key >= 1 and len(ours) >= 0.6 * len(lines)


@dataclass(frozen=True, slots=True)
class EvidenceShape(Generic[R]):
    """One kind of output: how its lines look, and how they are read."""

    kind: Kind
    name: str  # the segment shape's name (bundle.segments)
    # a line only this output prints, matched at the line's start; like ``around``, it asks for no
    # indentation (the segmenter takes a line's indentation off first)
    lines: re.Pattern[str]
    parse: Callable[[str, int], Sequence[R]]  # (text, its first line's number) -> records, in order
    example: str  # real lines of it, as a program printed them
    around: re.Pattern[str] | None = None  # the program's other lines (its stderr notes, a summary)

    def recognises(self, lines: list[str]) -> bool:
        """Is a text of these (non-empty) lines this output: mostly its lines, one at least?"""
        rows = (self.lines, self.around) if self.around is not None else (self.lines,)
        return mostly(lines, *rows, at_least=self.lines)

    @property
    def segment_pattern(self) -> str:
        """Its lines as a segment shape's pattern (anchored at a line's start there)."""
        both = [self.lines.pattern] + ([self.around.pattern] if self.around is not None else [])
        return "|".join(f"(?:{p.removeprefix('^')})" for p in both)

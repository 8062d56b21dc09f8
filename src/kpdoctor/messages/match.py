"""One matcher made of every message in the catalogue: which known message a line is, with its
captures, and for a wrapper (``Failed to execute iptables-restore: %v``) which message of the
payload's program the rest of the line is.

A line is looked at only by the messages whose needle (their longest literal word) it holds; the
templates' regular expressions then decide. A structured-era line is matched by its message
(``"Failed to execute iptables-restore" err=...``) as well as by the printf form.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace

try:  # one compiled pass for every needle; the loop over them is the fallback
    import ahocorasick_rs
except ImportError:  # pragma: no cover - the dependency is optional
    ahocorasick_rs = None  # type: ignore[assignment]

from kpdoctor.messages.schema import Catalogue, Message
from kpdoctor.messages.templates import Compiled, captures, compile_structured, compile_template


@dataclass(frozen=True, slots=True)
class Match:
    """A line read as one message, with what varied (the captures), and the payload's own message
    when the message wraps another program's output."""

    message: Message
    captures: dict[str, str]
    start: int
    payload: Match | None = None

    @property
    def kind(self) -> str:
        """The class that decides: a wrapper's payload when it is known, else the message's."""
        return self.payload.kind if self.payload is not None else self.message.kind

    @property
    def cause(self) -> str | None:
        return self.payload.cause if self.payload is not None and self.payload.cause else self.message.cause


class Matcher:
    """Every message of a catalogue, ready to read lines."""

    def __init__(self, catalogue: Catalogue) -> None:
        self.catalogue = catalogue
        self._forms: list[tuple[Message, Compiled]] = []
        self._by_needle: dict[str, list[int]] = defaultdict(list)
        self._component: dict[str, set[int]] = defaultdict(set)
        for m in catalogue:
            forms = [compile_template(m.template)]
            if m.structured is not None:
                forms.append(compile_structured(m.structured.msg))
            for c in forms:
                i = len(self._forms)
                self._forms.append((m, c))
                self._by_needle[c.needle].append(i)
                self._component[m.component].add(i)
        self._needles = list(self._by_needle)
        self._ac = ahocorasick_rs.AhoCorasick(self._needles) if ahocorasick_rs is not None else None

    def _present(self, line: str) -> Iterable[str]:
        """The needles ``line`` holds (one compiled pass when ahocorasick_rs is installed)."""
        if self._ac is None:
            return (n for n in self._by_needle if n in line)
        # in the catalogue's order, as the loop gives them: ties in match() are broken alike
        return [
            self._needles[i]
            for i in sorted({i for i, _, _ in self._ac.find_matches_as_indexes(line, overlapping=True)})
        ]

    def match(self, line: str, component: str | None = None) -> list[Match]:
        """Every message ``line`` is (of ``component`` only, when given), outermost first: the one
        that starts first in the line (a wrapper before the payload it holds), then one whose
        payload is read, then the longest."""
        found: dict[str, Match] = {}
        allowed = self._component.get(component, set()) if component is not None else None
        for needle in self._present(line):
            for i in self._by_needle[needle]:
                if allowed is not None and i not in allowed:
                    continue
                m, c = self._forms[i]
                got = c.regex().search(line)
                if got is None or m.key in found:
                    continue
                caps = captures(c, got)
                payload = None
                if m.payload:
                    rest = line[got.end() :] if not caps else _last(caps, c)
                    inner = self.match(rest, m.payload) if rest else []
                    payload = inner[0] if inner else None
                elif _ends_in_reason(c) and (rest := _last(caps, c)):
                    # "Could not fetch rule set generation id: {reason}": the reason is often
                    # another message of the same program ("Permission denied (you must be root)")
                    inner = self.match(rest, m.component)
                    payload = inner[0] if inner else None
                # where its own words start: a template that opens with a placeholder ("{op}
                # failed (...)") would otherwise start wherever the line does
                start = got.end(1) if c.parts and not isinstance(c.parts[0], str) else got.start()
                found[m.key] = Match(m, caps, start, payload)
        # of two readings that start alike, the one that reads its payload as a known message
        # ("error checking rule: %v" before "...: %v: %s" when the rest is iptables' own words)
        ordered = sorted(
            found.values(),
            key=lambda x: (x.start, x.message.payload is not None and x.payload is None, -len(x.message.template)),
        )
        return [_with_inner(m, ordered) for m in ordered]

    def broken_between(self, first: str, second: str) -> bool:
        """Is a message broken between these two lines (a word wrap, an editor's, a mail's, a
        tracker's): a form of it reads their join across the break, and neither line alone?"""
        joined = first.rstrip() + " " + second.lstrip()
        cut = len(first.rstrip())
        alone = {*self._present(first), *self._present(second)}
        for needle in self._present(joined):
            for i in self._by_needle[needle]:
                rx = self._forms[i][1].regex()
                got = rx.search(joined)
                if got is None or not got.start() < cut < got.end():
                    continue
                if needle in alone and (rx.search(first) or rx.search(second)):
                    continue  # read on its line already
                return True
        return False


def _with_inner(m: Match, found: list[Match]) -> Match:
    """A structured line's message whose error was not read as its payload (klog 2 quotes it in
    err="...", escaping its quotes), with the message the line holds after the message's own
    words as that payload: what it wraps is there, whatever the quoting made of it."""
    structured = m.message.structured
    if m.payload is not None or structured is None or "err" not in structured.keys:
        return m
    after = m.start + len(structured.msg)
    inner = next((x for x in found if x.start > after and x.message.key != m.message.key), None)
    return replace(m, payload=inner) if inner is not None else m


def _ends_in_reason(compiled: Compiled) -> bool:
    """Does the template end with a placeholder that takes the rest of the line (a reason)?"""
    last = compiled.parts[-1] if compiled.parts else ""
    return not isinstance(last, str) and last[1] == ".*"


def _last(captures: dict[str, str], compiled: Compiled) -> str:
    """What the wrapper's last placeholder holds: the payload."""
    return captures.get(compiled.names[-1], "") if compiled.names else ""

"""A packet's walk through netfilter, shared by the backends that evaluate rules: the packet as
the rules change it (:class:`State`), each rule it took (:class:`Step`), how a walk ends
(:class:`Outcome`), and how a rule that cannot be decided is tried both ways (:class:`Undecided`).

iptables tables and nftables chains hook the same points of the same kernel: a node's packet can
pass both, so both evaluators carry the same state.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass, field

from kpdoctor.dataplane.backend import Packet

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(slots=True)  # not frozen: built per rule and per step, frozen init is 5x slower
class Step:
    """A rule the packet took (or the policy it fell to)."""

    table: str
    chain: str
    line: int | None
    text: str
    probability: float  # probability of the branch when it took this rule
    # the artifact the rule was read from, when the walk crossed into another dump (the other
    # iptables backend's tables run at the same hooks); "": the dump the view is of
    origin: str = ""


@dataclass(slots=True)
class State:
    """The packet as the walk has changed it (addresses as integers), and what happened to it."""

    packet: Packet  # as it entered
    version: int
    src: int
    dst: int
    dport: int
    mark: int
    steps: list[Step] = field(default_factory=list)
    dnat: tuple[str, int | None] | None = None
    masquerade: bool = False
    notrack: bool = False
    affinity: list[int] = field(default_factory=list)  # lines of --rcheck rules seen
    dnat_step: Step | None = None  # the rule that translated the destination
    drop_mark_step: Step | None = None  # the rule that jumped to KUBE-MARK-DROP (the mark's cause)

    @classmethod
    def start(cls, packet: Packet) -> State:
        return cls(packet, packet.dst.version, int(packet.src), int(packet.dst), packet.dport, packet.mark)

    def copy(self) -> State:
        return State(
            self.packet,
            self.version,
            self.src,
            self.dst,
            self.dport,
            self.mark,
            list(self.steps),
            self.dnat,
            self.masquerade,
            self.notrack,
            list(self.affinity),
            self.dnat_step,
            self.drop_mark_step,
        )

    @property
    def current(self) -> Packet:
        """The packet with its rewritten destination and mark."""
        mk = ipaddress.IPv4Address if self.version == 4 else ipaddress.IPv6Address
        return dataclasses.replace(self.packet, dst=mk(self.dst), dport=self.dport, mark=self.mark)


@dataclass(slots=True)
class Outcome:
    probability: float
    verdict: str  # ACCEPT | DROP | REJECT | UNCERTAIN
    state: State
    reason: str = ""  # for UNCERTAIN: what could not be evaluated, and where
    by_mark: bool = False  # dropped for kube-proxy's drop mark, by a filter table not given
    # UNCERTAIN only because this table was not given, for a packet no rule given translated: its
    # completions can accept, drop or reject it, never send it to a backend (results.judge)
    open_table: str | None = None
    _endpoint: str | bool | None = field(default=False, repr=False, compare=False)  # False: not yet known

    @property
    def endpoint(self) -> str | None:
        """``ip:port`` the packet was DNATed to, if any (worked out once: sorting and reporting
        ask for it again and again)."""
        b = self._endpoint
        if b is False:
            dnat = self.state.dnat
            if dnat is None:
                b = None
            else:
                host, port = dnat
                port = port if port is not None else self.state.packet.dport
                b = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self._endpoint = b
        return b  # type: ignore[return-value]

    @property
    def decided_by(self) -> Step | None:
        """The rule (or policy) that gave the verdict: the last step taken (for a drop by mark,
        the rule that sent the packet to KUBE-MARK-DROP)."""
        if self.by_mark and self.state.drop_mark_step is not None:
            return self.state.drop_mark_step
        return self.state.steps[-1] if self.state.steps else None


class Undecided(Exception):
    """A rule whose match cannot be decided: the run is redone with it matching and not.
    ``where`` names the rule in the uncertain verdict ("line 12", "chain filter_INPUT")."""

    def __init__(self, key: int, line: int, reason: str, step: Step, where: str | None = None) -> None:
        super().__init__(reason)
        self.key, self.line, self.reason, self.step = key, line, reason, step
        self.where = where if where is not None else f"line {line}"

    @property
    def verdict_reason(self) -> str:
        return f"{self.reason} at {self.where}, and it decides the outcome"


def signature(outcomes: list[Outcome]) -> list[tuple[str, str, float]]:
    """What a run decided, comparable across the two ways of an undecidable rule. A branch that
    fell through un-DNATed has no backend (a KUBE-SEP chain without its DNAT rule, on a node in
    the middle of a sync): it sorts as "" next to the backends, never as None against a str."""
    return sorted((o.verdict, o.endpoint or "", round(o.probability, 9)) for o in outcomes)


class TooManyBranches(Exception):
    """The walk splits into more paths than the rules can account for (branches that multiply
    across chains): the run is uncertain, never an error."""


class Uncertain(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


Branch = tuple[float, State]
Result = tuple[float, State, str, str]


def merge_outcomes(outcomes: list[Outcome]) -> list[Outcome]:
    """Outcomes sorted by probability, most likely first; equal shares (kube-proxy prints
    probabilities to 10 decimals, so 1/5,000 comes out a little different each time) by backend."""
    return sorted(outcomes, key=lambda o: (-round(o.probability, 7), o.verdict, o.endpoint or ""))


def settle(
    results: list[Result], out: list[Branch], finals: list[Outcome], limit: int | None = None, where: str = ""
) -> None:
    """Sort a chain's branches: those that go on (accepted, returned, fallen off the end) into
    ``out``, those that ended into ``finals``; more than ``limit`` going on is a rule set whose
    probabilistic branches multiply: uncertain (:class:`TooManyBranches`), never an error."""
    for q, st, verdict, reason in results:
        if verdict in ("ACCEPT", "RETURN", "END"):
            out.append((q, st))
        else:
            finals.append(Outcome(q, verdict, st, reason))
    if limit is not None and len(out) > limit:
        raise TooManyBranches(
            f"more than {limit:,} paths through {where}: rules whose probabilistic branches multiply are not evaluated"
        )


def undecided_note(undecided: list[str]) -> list[str]:
    """The note a walk's undecidable rules that did not matter give (none, or one line)."""
    if not undecided:
        return []
    return ["could not evaluate, but both ways give the same outcome: " + ", ".join(dict.fromkeys(undecided))]


MAX_FORKS = 6  # undecidable rules tried both ways per packet (2**6 runs at most)


def walk_packet(
    once: Callable[[], list[Outcome]],
    packet: Packet,
    forced: dict[int, bool],
    undecided: list[str],
    describe: Callable[[Undecided], str],
) -> list[Outcome]:
    """One packet's walk, from a clean slate: undecidable rules tried both ways
    (:func:`run_forked`), and a walk whose branches multiply beyond bounds uncertain, never an
    error. ``forced`` and ``undecided`` are emptied first (``undecided`` then says, for this
    packet, which rules did not matter)."""
    forced.clear()
    undecided.clear()
    try:
        return run_forked(once, packet, forced, undecided, describe)
    except TooManyBranches as exc:
        return [Outcome(1.0, "UNCERTAIN", State.start(packet), str(exc))]
    finally:
        forced.clear()


def run_forked(
    once: Callable[[], list[Outcome]],
    packet: Packet,
    forced: dict[int, bool],
    undecided: list[str],
    describe: Callable[[Undecided], str],
    depth: int = 0,
) -> list[Outcome]:
    """Run a walk; a rule it cannot decide (raised as :class:`Undecided`) is forced one way,
    then the other, in ``forced`` (which the walk consults). When both give the same outcomes,
    the result is certain and ``undecided`` says which rule did not matter (``describe``);
    otherwise the walk is *uncertain* at that rule."""
    try:
        return once()
    except Undecided as und:
        if depth >= MAX_FORKS:
            return [_uncertain_at(packet, und)]
        results = []
        for choice in (True, False):
            forced[und.key] = choice
            results.append(run_forked(once, packet, forced, undecided, describe, depth + 1))
        del forced[und.key]
        if signature(results[0]) == signature(results[1]):
            undecided.append(describe(und))
            return results[1]
        return [_uncertain_at(packet, und)]


def _uncertain_at(packet: Packet, und: Undecided) -> Outcome:
    st = State.start(packet)
    st.steps.append(und.step)
    return Outcome(1.0, "UNCERTAIN", st, und.verdict_reason)

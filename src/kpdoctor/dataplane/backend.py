"""The seam between the verifier and one proxy mode's rules.

The verifier knows what the cluster says (:mod:`~kpdoctor.dataplane.expected`) and how to judge
an outcome (:mod:`~kpdoctor.dataplane.results`); a backend knows one mode's rules: iptables
chains, IPVS virtual servers and ipsets, or kube-proxy's nftables table. It evaluates a packet
into entries (backend, probability, the rules that decided, who wrote them), finds destinations
it still forwards that no Service owns, and walks one packet step by step for ``trace``.

A mode with no backend is "not evaluated", never "rules missing": see :mod:`.modes`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kpdoctor.dataplane.addresses import IPAddress
from kpdoctor.dataplane.expected import Case, NodeView, Owned
from kpdoctor.dataplane.results import Entry, Result, StaleRule, TraceBranch
from kpdoctor.model import Cite


@dataclass(frozen=True, slots=True)
class Packet:
    """The first packet of a new connection, as it enters the node."""

    src: IPAddress
    dst: IPAddress
    proto: str = "tcp"
    dport: int = 80
    sport: int = 40000
    iif: str | None = None
    oif: str | None = None
    mark: int = 0


@dataclass(slots=True)
class View:
    """What one independent set of live rules does with a case: iptables has one per backend
    (legacy, nft) when both hold Service rules; the verifier judges each, and says when they
    disagree."""

    label: str | None  # which set, when there are several ("legacy", "nft")
    entries: list[Entry]
    rules: list[Cite]  # the rules that decided, each once
    uncertain: list[str] = field(default_factory=list)  # why an entry could not be decided
    notes: list[str] = field(default_factory=list)
    # how long the rules keep a client on its backend (session affinity), in seconds, 0 for not
    # at all; None when this backend does not say (the verifier then does not compare it)
    affinity: int | None = None


@dataclass(slots=True)
class TracedView:
    """One packet's branches through one set of rules, every step kept."""

    label: str | None
    artifact: str
    branches: list[TraceBranch]
    notes: list[str] = field(default_factory=list)


class Backend(Protocol):
    """One proxy mode's rules, ready to evaluate (see the module docstring)."""

    mode: str

    def missing(self, family: int) -> str | None:
        """Why nothing can be evaluated for this address family (no rules of it), or None."""
        ...

    def split(self) -> dict[int, list[str]]:
        """Families whose Service rules are in several independent sets: family -> their artifacts."""
        ...

    def evaluate(self, case: Case) -> list[View]:
        """The outcome of the case's packet, one view per independent set of live rules."""
        ...

    def explain_mismatch(self, case: Case, result: Result) -> list[str]:
        """Notes that say where a mismatch comes from (may cite more rules in ``result``)."""
        ...

    def stale(self, owned: Owned, node: NodeView) -> list[StaleRule]:
        """Destinations the rules still forward that nothing in ``owned`` accounts for."""
        ...

    def trace(self, packet: Packet, hook: str) -> list[TracedView]:
        """Every branch of one packet (``hook``: prerouting or output), step by step."""
        ...

    def not_evaluated(self) -> list[str]:
        """Parts of the evidence this backend was given but does not evaluate, each said once."""
        ...


@runtime_checkable
class SettlesCases(Protocol):
    """An optional feature of a backend: it tells, for many cases at once and far more cheaply
    than evaluating them, which ones its rules certainly handle as one of the case's
    alternatives says (the verification's status "ok", whatever else its row would say). The
    verification builds those rows only when they are read (a large node's text report reads
    none of them); every other case is evaluated as usual."""

    def settled(self, cases: list[Case]) -> list[bool]:
        """Per case: True when its status is certainly "ok"; False when it must be evaluated."""
        ...


@runtime_checkable
class RecordsReads(Protocol):
    """An optional feature of a backend: it records which parts of its rules each evaluation
    reads (``deps``: a set to add them to, or None), and says which parts changed since a
    previous state. A result the agent carries over then depends on those parts only (iptables);
    any other backend's results depend on all of its rules."""

    deps: set[Any] | None

    def rule_changes(self, before: Any) -> tuple[Any, set[Any]]:
        """What every part of the rules holds now, and which parts differ from ``before``."""
        ...

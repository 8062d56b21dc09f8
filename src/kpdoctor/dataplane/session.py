"""The one front door to the node's dataplane: backend choice, verification, leftovers, traces.

Everything the verifier reads of a run's evidence comes in one frozen :class:`DataplaneInputs`
value, which :class:`kpdoctor.facts.Facts` produces (parsing is the facts' job). From it,
:func:`open_dataplane` gives the node's rules in the mode kube-proxy runs (:class:`NodeDataplane`)
or why they cannot be evaluated (:class:`NotEvaluated`); :func:`verify` is the pipeline's stage
(every core on a large node, the agent's carried-over results); ``kpdoctor verify``, ``trace``,
the report's failing traces and the agent all go through here, so they choose the same backend.

The inputs are providers, not values: each process that evaluates works them out itself (a large
node is verified on every core, and a worker parsing the rules on its own core is cheaper than
copying the parent's quarter-million parsed rules page by page).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kpdoctor import parallel
from kpdoctor.dataplane import modes
from kpdoctor.dataplane.addresses import IPAddress
from kpdoctor.dataplane.backend import Backend, RecordsReads
from kpdoctor.dataplane.expected import SHARED, Behaviour, NodeView, owned_destinations, partial_listing
from kpdoctor.dataplane.iptables.backend import IptablesBackend, has_service_rules
from kpdoctor.dataplane.iptables.native import native_walks
from kpdoctor.dataplane.ipvs.backend import IpvsBackend
from kpdoctor.dataplane.ipvs.leftovers import leftover_virtual_servers
from kpdoctor.dataplane.nftables.backend import NftablesBackend
from kpdoctor.dataplane.nftables.compile import NftTableRules
from kpdoctor.dataplane.results import Result, StaleRule, Verification
from kpdoctor.dataplane.reuse import Reuse
from kpdoctor.dataplane.reuse import setting as reuse_setting
from kpdoctor.dataplane.trace import Trace, trace, trace_results
from kpdoctor.dataplane.verify import (
    PackedShare,
    Part,
    leftovers,
    merge_shares,
    pack_share,
    run_verification,
    unevaluated,
)
from kpdoctor.parse import nft
from kpdoctor.parse.ipset import IpSet
from kpdoctor.parse.iptables import Ruleset
from kpdoctor.parse.ipvsadm import VirtualServer
from kpdoctor.parse.k8s import K8sObject

# Rule dumps at least this large are verified on every core (about 1,500 Services: below, forking
# and sending results back costs more than it saves).
PARALLEL_MIN_BYTES = 4 * 1024**2
# The cases are handed out in this many pieces, each to whichever process asks first (about 90
# cases a piece at 10,000 Services: small enough that no process waits long for another).
VERIFY_PIECES = 256
# The rule dumps a verification evaluates: iptables-save, -S and -L output (a fragment is not).
EVALUATED_FORMS = ("save", "S", "L")


@dataclass(frozen=True, slots=True)
class DataplaneInputs:
    """What the dataplane reads of one run's evidence, each part as a provider (see the module
    docstring); the facts layer builds it (``Facts.dataplane_inputs``)."""

    services: Callable[[], list[K8sObject]]
    slices: Callable[[], list[K8sObject]]
    endpoints: Callable[[], list[K8sObject]]
    pods: Callable[[], list[K8sObject]]
    # the Services came with the rest of the cluster's objects: one without EndpointSlices has none
    endpoints_exported: Callable[[], bool]
    rulesets: Callable[[], list[Ruleset]]
    nft_tables: Callable[[], list[tuple[nft.NftTable, str]]]  # each table summed up, with its artifact
    nft_rules: Callable[[], list[NftTableRules]]  # compiled for evaluation
    ipvs: Callable[[], list[tuple[VirtualServer, str]]]
    ipsets: Callable[[], dict[str, IpSet]]
    running: Callable[[], modes.RunningMode]
    node: Callable[[], NodeView]
    local_addresses: Callable[[str | None], list[IPAddress]]  # the node's own in a mode (dst-type LOCAL)
    behaviour: Callable[[], Behaviour]  # of the kube-proxy release and feature gates found
    # the text of every artifact of these kinds (rules, listings), each as "name\ntext": what a
    # carried-over result depends on when its backend does not record what it read
    rule_texts: Callable[[], list[str]]
    # the lines of the artifact named so, from its first line number: where a rule is now
    artifact_lines: Callable[[str], Iterable[tuple[int, str]]]
    rules_size: int  # bytes of rule evidence: how many processes verify
    # of which iptables-save output: the native core walks it fast enough that one process does
    # (a second one would parse everything again for 5 % of the wall time)
    iptables_size: int = 0
    reuse: Reuse | None = None  # the previous verification's results (the agent's cycles)


@dataclass(frozen=True, slots=True)
class Verified:
    """What the dataplane stage hands on to the checks and the report: the verification (None when
    there was nothing to compare: no Services, or no rules), or why it gave nothing although it
    was asked (``failed``: a bug, the run's timeout)."""

    verification: Verification | None = None
    failed: str | None = None


@dataclass(frozen=True, slots=True)
class NotEvaluated:
    """The rules of the mode kube-proxy runs cannot be evaluated: no backend reads that mode, or
    its state is not in the evidence (``reason`` says which, and what to give)."""

    reason: str
    mode: str | None


class NodeDataplane:
    """The node's rules in the mode kube-proxy runs, with the backend that evaluates them."""

    def __init__(
        self, inputs: DataplaneInputs, backend: Backend, running: modes.RunningMode, rulesets: list[Ruleset]
    ) -> None:
        self.inputs = inputs
        self.backend = backend
        self.running = running
        self.rulesets = rulesets  # the iptables rules the backend evaluates

    def verify(self, part: Part) -> Verification:
        """Every Service port of ``part`` against the rules (dataplane/verify.py)."""
        inputs, mode = self.inputs, self.running.mode
        m = modes.mode_named(mode)
        local = inputs.local_addresses(mode)
        reuse = inputs.reuse
        if reuse is not None:
            before = reuse.previous.rules if reuse.previous is not None else None
            held, changed = (
                self.backend.rule_changes(before) if isinstance(self.backend, RecordsReads) else (None, None)
            )
            reuse.begin(self._reuse_setting(local), self._line_of(), held, changed)
        return run_verification(
            self.backend,
            inputs.services(),
            inputs.slices(),
            inputs.endpoints(),
            inputs.pods(),
            inputs.node(),
            inputs.behaviour(),
            endpoints_exported=inputs.endpoints_exported(),
            part=part,
            deviations=m.deviations if m is not None else SHARED,
            reuse=reuse,
        )

    def services(self) -> list[K8sObject]:
        return self.inputs.services()

    def node(self) -> NodeView:
        return self.inputs.node()

    def trace(self, dst: IPAddress, port: int, proto: str, src: IPAddress | None, hook: str) -> list[Trace]:
        """One new connection, every branch step by step (``kpdoctor trace``)."""
        return trace(self.backend, self.inputs.node(), dst, port, proto, src, hook)

    def trace_results(self, results: list[Result], limit: int) -> dict[tuple[str, str], list[Any]]:
        """The first ``limit`` of ``results`` traced step by step (``kpdoctor trace --service``)."""
        return trace_results(self.backend, self.inputs.services(), self.inputs.node(), results, limit)

    def _reuse_setting(self, local: list[IPAddress]) -> object:
        """What every carried-over result shares (dataplane/reuse.py): a backend that records what
        each case looked at depends on its rules through those records, any other on all of them."""
        roles = [
            (rs.artifact, rs.variant, rs.family, rs.form, tuple(sorted(rs.tables)), has_service_rules(rs))
            for rs in self.rulesets
        ]
        texts = None if isinstance(self.backend, RecordsReads) else self.inputs.rule_texts()
        return reuse_setting(self.inputs.node().name, local, self.running.mode, roles, texts)

    def _line_of(self) -> Callable[[str, str], int | None]:
        """``line_of(artifact, text)``: the line of the rules evidence that reads ``text`` now."""
        found: dict[str, dict[str, int | None]] = {}
        reuse = self.inputs.reuse
        kept = reuse.next.rules_read if reuse is not None else {}
        scanned = {rs.artifact: rs for rs in self.rulesets if rs.scanned()}
        finders: dict[str, Callable[[str], int | None]] = {}
        artifact_lines = self.inputs.artifact_lines

        def line_of(name: str, text: str) -> int | None:
            pool = kept.get(name)
            if pool is not None:  # this parse's rules by their text (each text once: see keep_rules)
                r = pool.get(text)
                if r is not None:
                    return int(r.line)
            find = finders.get(name)
            if find is None and (rs := scanned.get(name)) is not None:
                find = finders[name] = rs.line_finder()
            if find is not None:  # read whole by the core, which finds a rule by its text
                return find(text)
            lines = found.get(name)
            if lines is None:
                lines = found[name] = {}
                for i, raw in artifact_lines(name):
                    t = raw.strip()
                    lines[t] = None if t in lines else i  # a text on two lines: not one rule
            return lines.get(text)

        return line_of


def choose_backend(inputs: DataplaneInputs, mode: str, rulesets: list[Ruleset], record: bool = False) -> Backend | None:
    """The backend that evaluates ``mode``'s rules (``rulesets`` and the mode's own state) over
    this evidence, or None when kpdoctor has none for it (or the evidence holds none of the state
    it reads: no nftables listing in nftables mode, no ``ipvsadm`` output in IPVS mode). The one
    place a backend is chosen."""
    local = inputs.local_addresses(mode)
    if mode == "iptables":
        return IptablesBackend(rulesets, local, record=record)
    if mode == "nftables" and (tables := inputs.nft_rules()):
        return NftablesBackend(tables, rulesets, local, record=record)
    if mode == "ipvs" and (servers := inputs.ipvs()):
        return IpvsBackend(servers, rulesets, inputs.ipsets(), local, record=record)
    return None


def open_dataplane(
    inputs: DataplaneInputs, *, record: bool = False, tracing: bool = False
) -> NodeDataplane | NotEvaluated:
    """The node's rules in the mode kube-proxy runs, or why they cannot be evaluated.

    ``tracing`` (``kpdoctor trace``): a mode the evidence does not tell is taken as iptables (the
    trace says so); ``record``: keep every step (traces)."""
    running = inputs.running()
    mode = running.mode
    backend = None
    rulesets = inputs.rulesets() if tracing else evaluated_rulesets(inputs)  # a trace follows a fragment too
    if tracing:
        mode = mode or "iptables"
        backend = choose_backend(inputs, mode, rulesets, record)
    elif mode is not None and (rulesets or mode in ("nftables", "ipvs")):
        backend = choose_backend(inputs, mode, rulesets, record)
    if backend is None:
        parts = [t for t, _ in inputs.nft_tables() if t.partial]
        return NotEvaluated(_not_evaluated_reason(running, tracing, bool(parts)), running.mode)
    return NodeDataplane(inputs, backend, running, rulesets)


def evaluated_rulesets(inputs: DataplaneInputs) -> list[Ruleset]:
    """The rule dumps a verification evaluates (:data:`EVALUATED_FORMS`)."""
    return [rs for rs in inputs.rulesets() if rs.form in EVALUATED_FORMS]


def _not_evaluated_reason(running: modes.RunningMode, tracing: bool, nft_part: bool = False) -> str:
    """Why the mode's rules cannot be evaluated (or traced), and what to give (``nft_part``: only
    a part of an nftables table was given)."""
    mode, how = running.mode, running.how
    if tracing:
        if mode == "nftables":
            return f"kube-proxy runs in nftables mode ({how}): give `nft -j list ruleset` (or `nft list ruleset`)"
        return modes.not_evaluated_reason(str(mode), how, "trace")
    if mode is None:
        return f"the proxy mode is not known: {how}"
    if mode == "iptables":
        return "no iptables-save output to evaluate kube-proxy's iptables mode with"
    if mode == "ipvs":
        return f"kube-proxy runs in ipvs mode ({how}), and no `ipvsadm -Ln` output was given to evaluate it with"
    if mode == "nftables":
        given = (
            "only a part of a table (a block cut out of it) was given" if nft_part else "no nftables listing was given"
        )
        return (
            f"kube-proxy runs in nftables mode ({how}), and {given} to evaluate it with: "
            "give `nft -j list ruleset` (or `nft list ruleset`)"
        )
    return modes.not_evaluated_reason(mode, how)


def verify(inputs: DataplaneInputs) -> Verification | None:
    """The verification, when there are both rules and Services to compare (the pipeline's stage).

    A large node whose rules are walked in Python (nftables mode; iptables with
    ``KPDOCTOR_CORE=python``) is verified on every core, split early: each process reads the evidence itself
    (on its own core, while the others would otherwise wait), then evaluates pieces of the Service
    ports as it asks for them (parallel.Tickets); none has to copy another's quarter-million parsed
    rules."""
    walked_in_python = inputs.rules_size - (inputs.iptables_size if native_walks() else 0)
    n = parallel.workers_for(walked_in_python, PARALLEL_MIN_BYTES)
    if n <= 1 or inputs.reuse is not None:
        return verify_part(inputs, Part())
    tickets = parallel.Tickets(VERIFY_PIECES)
    try:
        # the calling process also looks for stale rules, once the pieces are gone: while the
        # workers send their results
        parts: list[Callable[[], Any]] = [functools.partial(verify_part, inputs, Part(tickets))]
        parts += [functools.partial(verify_part_packed, inputs, Part(tickets, stale=False))] * (n - 1)
        done = parallel.run_parts(parts)
    finally:
        tickets.close()
    ver = done[0]
    if ver is None:
        return None
    # a worker that failed after taking pieces leaves them undone: then once more, here
    return merge_shares(ver, done[1:]) or verify_part(inputs, Part())


def verify_part_packed(inputs: DataplaneInputs, part: Part) -> PackedShare:
    """A worker's share of the verification, packed to be sent back."""
    ver = verify_part(inputs, part)
    return pack_share(ver) if ver is not None else ([], [], [])


def verify_part(inputs: DataplaneInputs, part: Part) -> Verification | None:
    """The share ``part`` of the verification, in this process."""
    services = inputs.services()
    rulesets = evaluated_rulesets(inputs)
    state = rulesets or inputs.ipvs() or inputs.nft_tables()
    if not services or not state:
        return None
    dp = open_dataplane(inputs)
    running = inputs.running()
    if isinstance(dp, NotEvaluated):
        ver = unevaluated(dp.reason, services, inputs.slices(), inputs.endpoints(), running.mode)
    else:
        ver = dp.verify(part)
    ver.mode_why = running.how
    if part.stale:
        ver.stale += mode_leftovers(inputs, running, rulesets)
    for t, artifact in inputs.nft_tables():
        if t.iptables_nft or running.mode == "nftables":  # nftables mode evaluates every table
            continue
        what = (
            "kube-proxy's table from nftables mode, which it does not run in"
            if t.name == nft.KUBE_PROXY_TABLE
            else "its rules may also drop Service traffic"
        )
        ver.not_evaluated.append(f"nftables table {t.described} ({artifact}) is not evaluated: {what}")
    return ver


def mode_leftovers(inputs: DataplaneInputs, running: modes.RunningMode, rulesets: list[Ruleset]) -> list[StaleRule]:
    """What modes kube-proxy does not run in still forward: iptables Service rules on a node
    in another mode; IPVS virtual servers no Service owns on an iptables node."""
    out: list[StaleRule] = []
    if running.mode is None:
        return out
    left = {s.mode for s in running.leftovers}
    node = inputs.node()
    if "iptables" in left:
        out += leftovers(IptablesBackend(rulesets, inputs.local_addresses(running.mode)), node, "iptables")
    servers = inputs.ipvs()
    if running.mode != "ipvs" and servers and not partial_listing(inputs.services()):
        owned = owned_destinations(inputs.services(), inputs.pods())
        out += leftover_virtual_servers(servers, owned, node)
    return out


def failing_traces(inputs: DataplaneInputs, ver: Verification, limit: int) -> dict[tuple[str, str], list[Any]]:
    """The first ``limit`` mismatched Service ports traced step by step in the rules of the mode
    kube-proxy runs (as `kpdoctor trace --service` does), while the rules are still loaded."""
    dp = open_dataplane(inputs, record=True, tracing=True)
    if isinstance(dp, NotEvaluated):
        return {}
    bad = sorted((r for r in ver.problems() if r.status == "mismatch"), key=lambda r: r.label)
    return dp.trace_results(bad, limit)

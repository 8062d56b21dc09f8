"""The verification's result model, whatever the proxy mode: what each Service port x traffic
class reached (:class:`Entry`), its verdict against the cluster (:class:`Result`, :func:`judge`),
destinations no Service owns (:class:`StaleRule`), and the whole (:class:`Verification`),
including when it could not be evaluated at all."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from kpdoctor import memo
from kpdoctor.dataplane.expected import Case, Expectation
from kpdoctor.model import Cite

PROB_TOLERANCE = 1e-3  # kube-proxy prints 10 decimals; equal shares are within this


_ROUNDED: dict[float, float] = memo.table()


def rounded(p: float) -> float:
    """A probability to 6 decimals for the report (memoised: a node has few distinct shares)."""
    r = _ROUNDED.get(p)
    if r is None:
        if len(_ROUNDED) > 100_000:
            _ROUNDED.clear()
        r = _ROUNDED[p] = round(p, 6)
    return r


_CITES: dict[tuple[str, int], Cite] = memo.table()


def rule_ref(c: Cite) -> dict[str, Any]:
    """A rule in the JSON report: its file and line; a rule with no line (read from ``nft -j``
    output, one line for the whole ruleset) carries its text, which says its chain and place."""
    if c.line is None:
        return {"artifact": c.artifact, "line": None, "text": c.text}
    return {"artifact": c.artifact, "line": c.line}


def rule_cite(artifact: str, line: int, text: str) -> Cite:
    """The citation of one rule line, shared (a DNAT rule is cited by every traffic class that
    reaches it; building a frozen Cite each time is a measurable share of a 10,000-Service run)."""
    key = (artifact, line)
    c = _CITES.get(key)
    if c is None:
        if len(_CITES) > 1_000_000:
            _CITES.clear()
        c = _CITES[key] = Cite(artifact, line, text.strip())
    return c


def move_cite(c: Cite, line: int) -> None:
    """Move the shared citation ``c`` of a rule to ``line``, in place (the node agent's carried
    results, dataplane/reuse.py: every result citing that rule moves with it). It leaves the memo
    under its old line first: a rule cited there from now on is another rule."""
    if _CITES.get((c.artifact, c.line or 0)) is c:
        del _CITES[(c.artifact, c.line or 0)]
    object.__setattr__(c, "line", line)  # frozen for everyone else


@dataclass(slots=True)
class Entry:
    """One outcome of the evaluated rules: an endpoint with its probability, or a verdict."""

    endpoint: str | None  # "ip:port" the packet is DNATed to (the JSON report's "backend")
    verdict: str  # ACCEPT | DROP | REJECT | UNCERTAIN
    probability: float
    rule: Cite | None = None  # the DNAT rule, or the rule/policy that refused
    chain: str | None = None  # chain of that rule
    ruleset: str | None = None  # iptables backend that produced it (when rules are split)
    # who wrote the rule that decided: "kube-proxy", another component ("calico", "docker"...),
    # or None when the evidence does not tell (a built-in chain's rule or policy)
    owner: str | None = None
    # refused by the proxy's own rule for destinations it has no Service rule for (nftables mode
    # rejects unknown ports of a ClusterIP and drops unallocated ClusterIPs): "no rules", not a
    # refusal the Service's rules chose
    no_service_rule: bool = False
    # UNCERTAIN only because this table is missing from the evidence, for a packet no rule given
    # translated: what the table's completions can do with it is accept, drop or reject (judge)
    open_table: str | None = None
    # refused by an IPVS virtual server with no real server taking new connections (``chain``
    # then says so, for the reader)
    no_real_servers: bool = False

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "backend": self.endpoint,
            "verdict": self.verdict,
            "probability": rounded(self.probability),
        }
        if self.rule is not None:
            out["rule"] = rule_ref(self.rule)
        if self.ruleset:
            out["iptables_backend"] = self.ruleset
        if self.owner:
            out["owner"] = self.owner
        return out


@dataclass(slots=True)
class Result:
    """One row of ``verification.results``."""

    service: str
    port: str
    protocol: str
    family: int
    traffic: str
    destination: str
    source: str | None
    status: str  # ok | mismatch | uncertain
    expected: list[Expectation]
    actual: list[Entry] = field(default_factory=list)
    rules: list[Cite] = field(default_factory=list)
    note: str = ""
    # for findings: what kind of mismatch, and its details
    kind: str = ""  # no-rules | refused | partly-refused | backends | not-refused | split | affinity
    stale_backends: list[str] = field(default_factory=list)
    missing_backends: list[str] = field(default_factory=list)
    uneven: bool = False
    local_policy: bool = False
    local_endpoints: list[str] = field(default_factory=list)
    service_cite: Cite | None = None
    # kind "affinity": (seconds the rules keep a client on its backend, seconds the Service asks)
    affinity: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        return f"{self.service}:{self.port}" if self.port else self.service

    def refusals(self) -> list[Entry]:
        return [e for e in self.actual if e.verdict in ("DROP", "REJECT")]

    def to_json(self, shared: dict[int, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
        """``shared``: expected-outcome JSON already built, by list identity (the traffic classes of
        one Service port share their expectations); valid for one rendering."""
        exp = shared.get(id(self.expected)) if shared is not None else None
        if exp is None:
            exp = []
            for alt in self.expected[:1]:
                if alt.refused:
                    exp.append({"backend": None, "verdict": "refused", "probability": 1.0})
                else:
                    share = rounded(1 / len(alt.backends))
                    exp.extend({"backend": b, "probability": share} for b in sorted(alt.backends))
            if shared is not None:
                shared[id(self.expected)] = exp
        out: dict[str, Any] = {
            "service": self.service,
            "port": self.port,
            "protocol": self.protocol,
            "family": f"IPv{self.family}",
            "traffic": self.traffic,
            "destination": self.destination,
            "source": self.source,
            "status": self.status,
            "expected": exp,
            "actual": [e.to_json() for e in self.actual],
            "rules": [rule_ref(c) for c in self.rules],
            "note": self.note,
        }
        if len(self.expected) > 1:
            out["accepted"] = [{"backends": sorted(a.backends), "why": a.why} for a in self.expected]
        if self.kind:
            out["mismatch"] = self.kind
        if self.stale_backends:
            out["stale_backends"] = self.stale_backends
        if self.missing_backends:
            out["missing_backends"] = self.missing_backends
        if self.affinity is not None:
            out["affinity_seconds"] = {"rules": self.affinity[0], "service": self.affinity[1]}
        return out


@dataclass(slots=True)
class StaleRule:
    """A destination the rules still forward (or refuse) that no Service owns."""

    family: int
    destination: str
    protocol: str
    label: str | None  # the Service named in the rule comments, if any
    backends: list[str]
    rules: list[Cite]
    nodeport: bool
    # the proxy mode whose state this is, when it is not the mode kube-proxy runs in (what a mode
    # switch left behind: iptables rules on an IPVS node, IPVS virtual servers on an iptables one)
    leftover_of: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "destination": self.destination,
            "protocol": self.protocol.upper(),
            "named": self.label,
            "backends": self.backends,
            "rules": [c.to_json() for c in self.rules],
        }
        if self.leftover_of:
            out["leftover_of"] = self.leftover_of
        return out


SETTLED = "ok"  # the status of a row the backend settled (backend.SettlesCases), built or not


@dataclass(slots=True)
class Verification:
    """Every result of one node. ``evaluated`` is False when no backend could read the mode
    kube-proxy runs in (or its rules are absent): then ``reason`` says why, there are no
    results, and it is neither clean nor a mismatch."""

    services_checked: int
    # one row per case evaluated, in the cases' order: its Result, or, for a case the backend
    # settled as "ok" (backend.SettlesCases), the Case itself, whose Result ``build`` makes when
    # it is first read (``results``); the accessors below answer without building any
    rows: list[Result | Case] = field(default_factory=list)
    stale: list[StaleRule] = field(default_factory=list)
    split: dict[int, list[str]] = field(default_factory=dict)  # family -> artifacts of both backends
    not_evaluated: list[str] = field(default_factory=list)
    # Services in the evidence that give nothing to verify although they are not headless (no
    # spec, clusterIP or ports): (NS/NAME, why). Not a verdict, and never clean.
    unverified: list[tuple[str, str]] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list, repr=False, compare=False)  # every case, in order
    # the parts of ``cases`` evaluated here, (start, end) in the order of ``results``
    ranges: list[tuple[int, int]] = field(default_factory=list, repr=False, compare=False)
    evaluated: bool = True
    reason: str = ""  # why it was not evaluated
    mode: str | None = None  # the proxy mode verified (or found, when it was not evaluated)
    mode_why: str = ""  # how that mode was told
    # builds the Result of a settled row (see ``rows``); None once every row is built
    build: Callable[[Case], Result] | None = field(default=None, repr=False, compare=False)

    @property
    def results(self) -> list[Result]:
        """Every row's Result, in order (the settled rows' built now, once)."""
        if self.build is not None:
            build, rows = self.build, self.rows
            for i, r in enumerate(rows):
                if isinstance(r, Case):
                    rows[i] = build(r)
            self.build = None
        return cast(list[Result], self.rows)

    @results.setter
    def results(self, results: list[Result]) -> None:
        self.rows = list(results)
        self.build = None

    def row(self, i: int) -> Result:
        """Row ``i``'s Result (built now if it was settled)."""
        r = self.rows[i]
        if isinstance(r, Case):
            assert self.build is not None
            r = self.rows[i] = self.build(r)
        return r

    def of_protocol(self, protocol: str) -> list[Result]:
        """The Results of one protocol's rows (``UDP``), in order, building only those."""
        out: list[Result] = []
        rows = self.rows
        for i, r in enumerate(rows):
            if (r.sp.protocol if isinstance(r, Case) else r.protocol).upper() == protocol:
                out.append(self.row(i))
        return out

    def problems(self) -> list[Result]:
        """The rows whose status is not "ok" (a settled row is ok: none is built)."""
        return [r for r in self.rows if isinstance(r, Result) and r.status != "ok"]

    def statuses(self) -> list[tuple[str, str, str]]:
        """(Service, label, status) of every row, in order, without building any."""
        return [
            (r.service, r.label, r.status) if isinstance(r, Result) else (r.sp.service, r.sp.label, SETTLED)
            for r in self.rows
        ]

    def only(self, service: str) -> Verification:
        """The results (and stale rules) of one Service, ``NS/NAME`` or ``NS/NAME:PORT``."""
        out = Verification(self.services_checked, split=self.split, not_evaluated=self.not_evaluated)
        out.evaluated, out.reason, out.mode, out.mode_why = self.evaluated, self.reason, self.mode, self.mode_why
        out.rows = [
            r
            for r in self.rows
            if service_matches(r.label if isinstance(r, Result) else r.sp.label, service)
        ]
        out.build = self.build
        out.stale = [s for s in self.stale if service_matches(s.label, service)]
        out.unverified = [u for u in self.unverified if service_matches(u[0], service)]
        out.services_checked = len({svc for svc, _, _ in out.statuses()})
        return out

    def count(self, status: str) -> int:
        """How many rows have this status (a settled row is "ok"), none built."""
        return sum(1 for r in self.rows if (r.status if isinstance(r, Result) else SETTLED) == status)

    @property
    def clean(self) -> bool:
        ok = self.evaluated and bool(self.rows) and not self.problems()
        return ok and not self.stale and not self.unverified

    def to_json(self) -> dict[str, Any]:
        shared: dict[int, list[dict[str, Any]]] = {}
        return {
            "services_checked": self.services_checked,
            "ok": self.count("ok"),
            "mismatches": self.count("mismatch"),
            "uncertain": self.count("uncertain"),
            "results": [r.to_json(shared) for r in self.results],
            "stale_rules": [s.to_json() for s in self.stale],
            "not_evaluated": list(self.not_evaluated),
            "unverified": [{"service": svc, "reason": why} for svc, why in self.unverified],
            "evaluated": self.evaluated,
            **({"reason": self.reason} if not self.evaluated else {}),
            **({"proxy_mode": {"mode": self.mode, "how": self.mode_why}} if self.mode else {}),
        }


def service_matches(label: str | None, wanted: str) -> bool:
    """``ns/name:port`` against a filter ``ns/name`` (every port) or ``ns/name:port``; a filter
    may list several, comma-separated (what :func:`resolve_service` makes of ``ns/name:53`` when
    port 53 is both the "dns" and the "dns-tcp" port)."""
    if not label:
        return False
    if "," in wanted:
        return any(service_matches(label, w) for w in wanted.split(","))
    if ":" in wanted:
        return label == wanted
    return label == wanted or label.startswith(wanted + ":")


# What any filter table can do with a packet that reaches it: accept, drop or reject. It cannot
# translate it: only nat rewrites addresses.
COMPLETIONS = ("ACCEPT", "DROP", "REJECT")


def kube_proxy_completion(case: Case) -> str:
    """What kube-proxy's own filter rules do with this case's traffic when its nat rules did not
    translate it: reject it when the Service port has nothing to send it to (its "has no
    endpoints" REJECT, or the drop of external traffic without local endpoints), else let it pass."""
    return "REJECT" if any(a.refused for a in case.alternatives) else "ACCEPT"


def judge(case: Case, entries: list[Entry]) -> tuple[str, str, Expectation | None]:
    """Status and mismatch kind of one evaluated case, and the alternative it matched.

    Branches left open only by a missing table (``Entry.open_table``) are judged under every
    completion of that table: a *mismatch* when none reaches what the cluster expects (a packet
    to a Service with endpoints that nat did not translate reaches no backend, whatever filter
    does), *ok* when kube-proxy's own rules for that table reach it, *uncertain* otherwise."""
    if any(e.verdict == "UNCERTAIN" and e.open_table is None for e in entries):
        return "uncertain", "", None
    if not any(e.verdict == "UNCERTAIN" for e in entries):
        return _judge_decided(case, entries)
    judged = {
        c: _judge_decided(case, [dataclasses.replace(e, verdict=c) if e.verdict == "UNCERTAIN" else e for e in entries])
        for c in COMPLETIONS
    }
    if all(status == "mismatch" for status, _, _ in judged.values()):
        return judged["ACCEPT"]  # the kind as the packet stands: not translated
    own = judged[kube_proxy_completion(case)]
    if own[0] == "ok":
        return own
    return "uncertain", "", None


def open_note(case: Case, entries: list[Entry], status: str) -> str:
    """What a result judged over a missing table's completions rests on, in words."""
    tables = sorted({e.open_table for e in entries if e.verdict == "UNCERTAIN" and e.open_table})
    if not tables:
        return ""
    missing = " and ".join(f"the {t} table" for t in tables)
    if status == "mismatch":
        return (
            f"not translated to any backend by the nat rules; {missing} was not given, but no {tables[0]} rule "
            "can send it to a backend (it can only accept, drop or reject)"
        )
    if status == "ok":
        return (
            f"not translated by the nat rules; {missing} was not given: kube-proxy's own {tables[0]} rules "
            f"{'reject' if kube_proxy_completion(case) == 'REJECT' else 'pass'} it there, as expected"
        )
    return f"not translated by the nat rules; what {missing} (not given) does with it decides"


def _judge_decided(case: Case, entries: list[Entry]) -> tuple[str, str, Expectation | None]:
    fwd: dict[str, float] = {}
    refused = through = unowned = 0.0
    for e in entries:
        if e.verdict == "ACCEPT" and e.endpoint:
            fwd[e.endpoint] = fwd.get(e.endpoint, 0.0) + e.probability
        elif e.verdict in ("DROP", "REJECT"):
            refused += e.probability
            unowned += e.probability if e.no_service_rule else 0.0
        else:
            through += e.probability
    for alt in case.alternatives:
        if alt.refused:
            if refused >= 1 - PROB_TOLERANCE:
                return "ok", "", alt
            continue
        n = len(alt.backends)
        if set(fwd) == set(alt.backends) and all(abs(p - 1 / n) <= PROB_TOLERANCE for p in fwd.values()):
            return "ok", "", alt
    if through + unowned >= 1 - PROB_TOLERANCE:
        kind = "no-rules"
    elif refused >= 1 - PROB_TOLERANCE:
        kind = "refused"
    elif refused > PROB_TOLERANCE:
        kind = "partly-refused"
    elif all(a.refused for a in case.alternatives):
        kind = "not-refused"
    else:
        kind = "backends"
    return "mismatch", kind, None


def outcome_signature(entries: list[Entry]) -> list[tuple[str, str, float]]:
    """Comparable outcome of one backend's rules; un-DNATed branches have no backend ("")."""
    return sorted((e.endpoint or "", e.verdict, round(e.probability, 3)) for e in entries)


def describe_entries(entries: list[Entry]) -> str:
    parts = []
    for e in entries:
        what = e.endpoint if e.endpoint else ("falls through" if e.verdict == "ACCEPT" else e.verdict)
        parts.append(f"{what} ({e.probability:.0%})")
    return ", ".join(parts) or "nothing"


@dataclass(slots=True)
class TraceStep:
    artifact: str
    table: str
    chain: str
    line: int | None
    rule: str
    probability: float

    def to_json(self) -> dict[str, Any]:
        return {
            "artifact": self.artifact,
            "table": self.table,
            "chain": self.chain,
            "line": self.line,
            "rule": self.rule,
            "probability": round(self.probability, 6),
        }


@dataclass(slots=True)
class TraceBranch:
    probability: float
    verdict: str
    endpoint: str | None  # "ip:port" the packet is DNATed to (the JSON's "backend")
    steps: list[TraceStep]
    reason: str = ""
    masquerade: bool = False
    affinity_lines: list[int] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        if self.verdict == "UNCERTAIN":
            return f"uncertain: {self.reason}"
        if self.verdict == "ACCEPT":
            if self.endpoint:
                return f"DNAT to {self.endpoint}" + (" (masqueraded)" if self.masquerade else "")
            return "not translated: leaves for its original destination"
        return self.verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "probability": round(self.probability, 6),
            "verdict": self.verdict,
            "backend": self.endpoint,
            "outcome": self.outcome,
            "masquerade": self.masquerade,
            "reason": self.reason or None,
            "affinity_rules": self.affinity_lines,
            "steps": [s.to_json() for s in self.steps],
        }

"""Facts: typed models parsed lazily from the evidence, each parsed once per run.

Checks read evidence only through here, never by parsing raw text themselves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Generic, TypeVar

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.bundle.loader import Evidence
from kpdoctor.dataplane import modes
from kpdoctor.dataplane.addresses import IPAddress, host_port
from kpdoctor.dataplane.expected import SHARED, ZONE_LABEL, Behaviour, NodeView, local_addresses
from kpdoctor.dataplane.iptables.native import core_missing, native_walks
from kpdoctor.dataplane.nftables.compile import NftTableRules, compile_listing
from kpdoctor.dataplane.reuse import Reuse
from kpdoctor.dataplane.session import DataplaneInputs
from kpdoctor.facts import iptables_variant
from kpdoctor.facts.cluster import ClusterFacts, SliceView, networks, node_ips, pod_cidrs
from kpdoctor.facts.duplicates import DuplicatedRule, duplicated_rules
from kpdoctor.facts.iptables_variant import HostIptables
from kpdoctor.facts.log import (
    FLAG,
    K3S_RUNNING,
    PROXY_MODE,
    SYNC_MODE,
    VERSION_GLOG,
    VERSION_STRUCTURED,
    LogFacts,
    mode_of,
)
from kpdoctor.facts.node import NodeState
from kpdoctor.knowledge import Messages, Signature, scanned
from kpdoctor.model import Cite
from kpdoctor.parse import k8s, kernel_config, kpconfig, kubectl_describe, kubectl_table, nft, system
from kpdoctor.parse.clients import SshAttempt, ssh_attempts
from kpdoctor.parse.cni import CniConfig, parse_cni_config
from kpdoctor.parse.counts import LineCount, parse_line_count
from kpdoctor.parse.diagnostics import Diagnostic
from kpdoctor.parse.evidence_shape import EvidenceShape, Record
from kpdoctor.parse.health import parse_proxy_mode
from kpdoctor.parse.ipset import IpSet, parse_ipsets
from kpdoctor.parse.iptables import Ruleset, parse_list, parse_rules_s, parse_save
from kpdoctor.parse.ipvsadm import Timeouts, VirtualServer, parse_ipvsadm_list, parse_timeouts
from kpdoctor.parse.k8s import K8sObject, Objects
from kpdoctor.parse.kpconfig import FlagValue, KubeProxyConfig, Source
from kpdoctor.parse.loadtest import ConnectTimes, connect_times
from kpdoctor.parse.logscan import Scanner, ScanResult
from kpdoctor.parse.lookups import WaitedLookup, waited_lookups
from kpdoctor.versions import IptablesVersion, KernelVersion, KubeVersion

T = TypeVar("T")
R = TypeVar("R", bound=Record)


@dataclass(frozen=True, slots=True)
class ListedBackends:
    """A Service's ready endpoints as one listing shows them all (:attr:`Facts.listed_backends`)."""

    backends: frozenset[str]  # ip:port
    cite: Cite  # where they are listed
    objects: bool  # read from objects (which verification reads too), not a `kubectl get endpoints` row
    ready_only: bool = True  # False: every endpoint, ready or not (an EndpointSlice table)


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    """A version together with where it was read."""

    value: T
    cite: Cite


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    name: str
    origin: str  # "--node" | "manifest" | "Node object" | "hostname" | "addresses" | "hostnameOverride"
    detail: str = ""  # what the rule matched ("hostname ip-10-0-0-1", "address 10.0.0.1 on eth0")

    @property
    def inferred(self) -> bool:
        """Chosen from the node's own evidence, not given (--node, manifest) nor the only Node."""
        return self.origin in ("hostname", "addresses", "hostnameOverride")

    def describe(self) -> str:
        """Which rule chose the node, for the report (docs/verification.md states the order)."""
        how = {
            "--node": "given with --node",
            "manifest": "named by the bundle's manifest",
            "Node object": "the only Node in the evidence",
            "hostname": "the Node named by the node's hostname",
            "addresses": "the Node whose addresses are the node's own",
            "hostnameOverride": "the Node kube-proxy's hostnameOverride names, whose addresses are the node's",
        }.get(self.origin, self.origin)
        return how + (f" ({self.detail})" if self.detail else "")


def _node_info(node: K8sObject, field: str) -> str:
    return str(k8s.as_dict(k8s.as_dict(node.body.get("status")).get("nodeInfo")).get(field) or "")


def _first_of_each(listings: list[tuple[Artifact, list[VirtualServer]]]) -> list[tuple[VirtualServer, str]]:
    """Each virtual server once, from the first listing that has it, with that listing's name."""
    out: dict[tuple[str, str], tuple[VirtualServer, str]] = {}
    for a, vss in listings:
        for vs in vss:
            out.setdefault((vs.protocol, vs.address), (vs, a.name))
    return list(out.values())


def _first_line_cite(art: Artifact, text: str | None = None) -> Cite:
    body = text if text is not None else art.text
    for i, line in enumerate(body.splitlines()):
        if line.strip():
            return Cite(art.name, art.first_line + i, line.strip())
    return Cite(art.name, art.first_line, "")


def is_kube_proxy_workload(obj: K8sObject) -> bool:
    labels = (obj.body.get("metadata") or {}).get("labels") or {}
    if labels.get("k8s-app") == "kube-proxy" or labels.get("component") == "kube-proxy":
        return True
    return obj.name.startswith("kube-proxy")


def containers_of(obj: K8sObject) -> list[dict[str, object]]:
    """Containers of a Pod or of a workload's Pod template."""
    spec = obj.body.get("spec") or {}
    if obj.kind != "Pod":
        spec = ((spec.get("template") or {}).get("spec")) or {}
    return [c for c in (spec.get("containers") or []) if isinstance(c, dict)]


def _list(v: object) -> list[object]:
    return list(v) if isinstance(v, list) else []


def pod_spec_of(obj: K8sObject) -> dict[str, object]:
    spec = obj.body.get("spec") or {}
    if obj.kind != "Pod":
        spec = ((spec.get("template") or {}).get("spec")) or {}
    return spec if isinstance(spec, dict) else {}


def _node_of_host(nodes: list[K8sObject], host: str) -> K8sObject | None:
    """The Node a hostname belongs to: by name, by its Hostname address, or by the first label of
    its name (``ip-10-0-0-1`` is Node ``ip-10-0-0-1.ec2.internal`` on EKS)."""
    for n in nodes:
        if n.name == host:
            return n
    for n in nodes:
        addrs = k8s.as_list(k8s.as_dict(n.body.get("status")).get("addresses"))
        if any(isinstance(a, dict) and a.get("type") == "Hostname" and a.get("address") == host for a in addrs):
            return n
    short = [n for n in nodes if n.name.split(".")[0] == host.split(".")[0]]
    return short[0] if len(short) == 1 else None


def _shared_address(node: K8sObject, own: dict[IPAddress, str]) -> tuple[IPAddress, str] | None:
    """An InternalIP/ExternalIP of ``node`` that is one of this node's own addresses, with its
    interface."""
    return next(((ip, own[ip]) for ip in node_ips(node) if ip in own), None)


class Facts:
    """Lazily parsed, cached view of one run's evidence."""

    def __init__(
        self,
        evidence: Evidence,
        node: str | None = None,
        signatures: tuple[Signature, ...] | None = None,
        reuse: Reuse | None = None,
    ) -> None:
        self.evidence = evidence
        # the previous verification's results, carried over where nothing changed (the agent)
        self.reuse = reuse
        # the signatures the log scan looks for (the evidence's, unless a caller narrows them)
        self._signatures = signatures
        self._node_flag = node
        self._nothing: dict[Kind, str | None] = {}
        self._records: dict[Kind, list[tuple[Any, Cite]]] = {}  # a registered shape's, by kind (records)
        # what parsing found wrong in an artifact, outside the parsers that keep their own
        self.diagnostics: list[tuple[str, Diagnostic]] = []

    def has(self, kind: Kind) -> bool:
        """Whether the evidence holds ``kind`` *and* it parsed to something: an empty List or an
        unreadable JSON file must skip the checks that need it, never let them "run" clean."""
        return self.evidence.has(kind) and self.nothing_in(kind) is None

    def nothing_in(self, kind: Kind) -> str | None:
        """Why the ``kind`` given holds nothing usable (an input problem), or None. Worked out
        when first asked: a kind no check asks about is not parsed for this."""
        if kind not in self._nothing:
            test = _NOTHING.get(kind)
            self._nothing[kind] = test[1] if test is not None and self.evidence.has(kind) and test[0](self) else None
        return self._nothing[kind]

    def parsed_nothing(self, asked_only: bool = False) -> dict[Kind, str]:
        """Every kind given that held nothing usable, with why (``asked_only``: of the kinds
        already looked at, parsing nothing more)."""
        kinds = list(self._nothing) if asked_only else list(_NOTHING)
        return {k: why for k in kinds if (why := self.nothing_in(k)) is not None}

    def of(self, kind: Kind) -> list[Artifact]:
        return self.evidence.of(kind)

    # -- logs ---------------------------------------------------------------------------
    @property
    def signatures(self) -> tuple[Signature, ...]:
        """The signatures the log scan looks for: the evidence's (read when first asked for),
        unless a caller narrowed them."""
        return self._signatures if self._signatures is not None else self.evidence.signatures

    @cached_property
    def log_artifacts(self) -> list[Artifact]:
        # the kernel's log too: the messages catalogue reads its lines (kube-proxy's own
        # signatures do not match them); and what a timed lookup printed (dig's failed tries)
        logs = self.of(Kind.KUBE_PROXY_LOG) + self.of(Kind.KERNEL_LOG) + self.of(Kind.LOOKUP_TIMING)
        return sorted(logs, key=lambda a: 0 if a.previous else 1)

    @cached_property
    def log(self) -> LogFacts:
        if not self.log_artifacts:  # nothing to scan: the catalogue is not read for it
            return LogFacts(ScanResult())
        scan = Scanner(scanned(self.signatures)).scan(self.log_artifacts)
        return LogFacts(scan, {s.id for s in self.signatures if s.failure})

    # -- rules --------------------------------------------------------------------------
    @cached_property
    def rulesets(self) -> list[Ruleset]:
        out: list[Ruleset] = []
        # the agent's cycles: rules the Python evaluator walks are parsed with the previous
        # cycle's (their compiled forms kept); the native core reads each dump whole again
        pooled = self.reuse if not (native_walks() and core_missing() is None) else None
        for a in self.of(Kind.IPTABLES_SAVE):
            fam = int(a.attrs.get("family", "4"))
            fragment = a.attrs.get("fragment") == "true"
            text, backend = a.read_text(), a.attrs.get("backend")
            pool = pooled.rules_of(a.name) if pooled is not None else None
            rs = parse_save(text, a.name, backend, fam, a.first_line, fragment, _table_named(a), reuse=pool)
            if pooled is not None:
                pooled.keep_rules(a.name, rs.all_rules(), rs.unpooled)
            out.append(rs)
        for a in self.of(Kind.IPTABLES_RULES_S):
            fam = int(a.attrs.get("family", "4"))
            out.append(parse_rules_s(a.text, a.name, fam, a.first_line, _table_named(a)))
        for a in self.of(Kind.IPTABLES_LIST):
            out.append(parse_list(a.text, a.name, int(a.attrs.get("family", "4")), a.first_line))
        return out

    @cached_property
    def duplicated_rules(self) -> list[DuplicatedRule]:
        """Kubernetes rules found twice or more in one chain of one dump (facts/duplicates.py):
        read once for the checks that judge them (a userspace-era jump is kube-proxy's bug, any
        other a binary's)."""
        return duplicated_rules(self.rulesets)

    def services_commented(self, phrase: str) -> list[tuple[str, Cite]]:
        """(namespace/name[:port], rule) for every rule whose comment says ``<service> <phrase>``
        ("has no endpoints", "has no local endpoints"), in any rule format."""
        svc = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+(?::[\w.-]*)?)\s+" + re.escape(phrase))
        out: list[tuple[str, Cite]] = []
        for rs in self.rulesets:
            for r in rs.containing(phrase):  # the raw line first: reading the comment tokenises the rule
                m = svc.search(r.comment if r.comment and phrase in r.comment else r.text)
                if m:
                    out.append((m.group(1), Cite(rs.artifact, r.line, r.text.strip())))
        return out

    # -- cluster objects ----------------------------------------------------------------
    @cached_property
    def objects(self) -> Objects:
        """Every file's objects, each object once (a bundle's file and a ``kubectl get`` of the
        same cluster overlap); when the Nodes given do not say which is this node, a diagnostic
        tells the user how to say it."""
        merged = k8s.merge(
            a.parsed if isinstance(a.parsed, Objects) else k8s.parse_objects(
                a.read_text(), a.name, a.first_line, a.attrs.get("kind"), a.attrs.get("name"))
            for a in self.of(Kind.K8S_OBJECTS))  # fmt: skip
        problem = self._pick_node(merged.of("Node"))[2]
        if problem:
            merged.diagnostics.append(Diagnostic(None, problem))
        return merged

    @cached_property
    def cluster(self) -> ClusterFacts:
        """Typed views of the cluster's objects (Services, EndpointSlices, Endpoints, Nodes, Pods)."""
        carry = None
        if self.reuse is not None:
            carry = (self.reuse.previous.views if self.reuse.previous is not None else {}, self.reuse.next.views)
        return ClusterFacts(self.objects, carry, self.table_objects)

    @cached_property
    def table_objects(self) -> Objects:
        """Services and Nodes read from `kubectl get` tables and from `kubectl describe` (a
        described Service with its Endpoints when every one is shown): partial objects (what
        kubectl did not print is unknown), kept apart from the objects given whole: never taken
        to list every Service, never "the Services came with their EndpointSlices"; a table
        row's endpoints are unknown."""
        out = Objects()
        for a in self.of(Kind.KUBECTL_TABLE):
            out.items.extend(kubectl_table.table_objects(a.read_text(), a.name, a.first_line).items)
        for a in self.of(Kind.KUBECTL_DESCRIBE):
            out.items.extend(kubectl_describe.described_objects(a.read_text(), a.name, a.first_line).items)
        return out

    @cached_property
    def listed_backends(self) -> dict[tuple[str | None, str], ListedBackends]:
        """Each Service's ready endpoints as ``ip:port`` (as kube-proxy's DNAT names them), where a
        listing gives every one: its EndpointSlices or v1 Endpoints given whole, a `kubectl
        describe service` that shows them all (:attr:`backends_in_objects`), a `kubectl get
        endpoints` row without "+ N more" (:attr:`backends_in_tables`). By (namespace, name); a
        table that did not say the namespace gives (None, name). A Service whose listing shows no
        ready endpoint is left out (kube-proxy may then use terminating ones no listing shows)."""
        return {**self.backends_in_tables, **self.backends_in_objects}

    @cached_property
    def backends_in_objects(self) -> dict[tuple[str | None, str], ListedBackends]:
        """:attr:`listed_backends` from objects: EndpointSlices (over v1 Endpoints, as kube-proxy
        reads them), v1 Endpoints, descriptions that show every endpoint."""
        out: dict[tuple[str | None, str], ListedBackends] = {}
        views = [*self.cluster.slices, *self.cluster.endpoints]
        views += [SliceView.of_endpoints(o) for o in self.table_objects.of("Endpoints")]  # described whole
        grouped: dict[str, list[SliceView]] = {}
        for v in views:
            if v.service:
                grouped.setdefault(v.service, []).append(v)
        for service, vs in grouped.items():
            if any(v.legacy for v in vs) and not all(v.legacy for v in vs):
                vs = [v for v in vs if not v.legacy]  # slices over v1 Endpoints, as kube-proxy reads them
            backends = frozenset(
                host_port(a, port)
                for v in vs
                for e in v.endpoints
                if e.ready
                for a in e.addresses[:1]
                for _, port in v.ports
            )
            if backends:
                o = vs[0].obj
                ns, _, name = service.rpartition("/")
                out.setdefault((ns or None, name), ListedBackends(backends, Cite(o.artifact, o.line, o.ref), True))
        return out

    @cached_property
    def backends_in_tables(self) -> dict[tuple[str | None, str], ListedBackends]:
        """:attr:`listed_backends` from `kubectl get endpoints` rows that list every one, or
        from `kubectl get endpointslices` rows (every endpoint, ready or not: a Service's rows
        together, when none was cut)."""
        out: dict[tuple[str | None, str], ListedBackends] = {}
        slices: dict[tuple[str | None, str], list[tuple[kubectl_table.ShownEndpoints, Cite]]] = {}
        for a in self.of(Kind.KUBECTL_TABLE):
            for row in kubectl_table.shown_endpoints(a.read_text()):
                cite = Cite(a.name, a.first_line + row.line, row.text)
                if not row.ready_only:
                    slices.setdefault((row.namespace, row.name), []).append((row, cite))
                elif row.whole:
                    out.setdefault((row.namespace, row.name), ListedBackends(frozenset(row.backends), cite, False))
        for key, rows in slices.items():
            if key not in out and all(r.more == 0 for r, _ in rows) and any(r.backends for r, _ in rows):
                backends = frozenset(b for r, _ in rows for b in r.backends)
                out[key] = ListedBackends(backends, rows[0][1], False, ready_only=False)
        return out

    @cached_property
    def kube_proxy_pods(self) -> list[K8sObject]:
        return [o for o in self.objects.of("Pod") if is_kube_proxy_workload(o)]

    @cached_property
    def kube_proxy_workloads(self) -> list[K8sObject]:
        return [o for o in self.objects.of("DaemonSet") if is_kube_proxy_workload(o)]

    # -- node ---------------------------------------------------------------------------
    @cached_property
    def node(self) -> NodeIdentity | None:
        """The node being diagnosed: --node, manifest, the only Node object, hostname.

        Never kube-proxy's hostnameOverride: that value is itself evidence to check.
        """
        return self._node_choice[0]

    @cached_property
    def _node_choice(self) -> tuple[NodeIdentity | None, K8sObject | None, str | None]:
        return self._pick_node(self.objects.of("Node"))

    def _pick_node(self, nodes: list[K8sObject]) -> tuple[NodeIdentity | None, K8sObject | None, str | None]:
        """The node's identity, its Node object, and what the user should know when the Nodes in
        the evidence leave it open: a --node that names none of them (a typo would otherwise
        pass silently, and "local" endpoints be judged by a name no Node has), or several Nodes
        and nothing to choose between them."""
        nodes = [n for n in nodes if n.name]
        names = sorted({n.name for n in nodes})
        listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        given = (
            NodeIdentity(self._node_flag, "--node")
            if self._node_flag
            else (NodeIdentity(self.evidence.node, "manifest") if self.evidence.node else None)
        )
        if given is not None:
            obj = next((n for n in nodes if n.name == given.name), None)
            if obj is None and names:
                origin = "" if given.origin == "--node" else " (the bundle's node)"
                return given, None, f"no Node named {given.name}{origin} in the evidence (Nodes: {listed})"
            return given, obj, None
        if len(names) == 1:
            return NodeIdentity(nodes[0].name, "Node object"), nodes[0], None
        host = next((h for a in self.of(Kind.HOSTNAME) if (h := system.parse_hostname(a.text))), None)
        if host:
            obj = _node_of_host(nodes, host)
            if obj is not None:
                return NodeIdentity(obj.name, "hostname", f"hostname {host}"), obj, None
        own = self._own_addresses
        by_address = [(n, ip) for n in nodes if (ip := _shared_address(n, own)) is not None]
        if len({n.name for n, _ in by_address}) == 1:
            n, ip = by_address[0]
            return NodeIdentity(n.name, "addresses", f"{ip[0]} on {ip[1]}"), n, None
        override = self._override_name()
        if override:
            named = [n for n in nodes if n.name.lower() == override.lower()]
            if len(named) == 1 and (ip := _shared_address(named[0], own)) is not None:
                why = f"{override}; {ip[0]} on {ip[1]}"
                return NodeIdentity(named[0].name, "hostnameOverride", why), named[0], None
        if host:
            if names:
                return (
                    NodeIdentity(host, "hostname", f"hostname {host}"),
                    None,
                    f"{len(names)} Nodes in the evidence, none of them this node's hostname {host}: "
                    f"give --node NAME ({listed})",
                )
            return NodeIdentity(host, "hostname", f"hostname {host}"), None, None
        if names:
            return None, None, f"{len(names)} Nodes in the evidence: give --node NAME ({listed})"
        return None, None, None

    @cached_property
    def _own_addresses(self) -> dict[IPAddress, str]:
        """The node's own addresses (``ip addr``, text or JSON) with their interface: global ones,
        not loopback, link-local or kube-proxy's dummy interface (which holds Service addresses)."""
        out: dict[IPAddress, str] = {}
        for kind in (Kind.IP_ADDR, Kind.IP_LINK):
            for a in self.of(kind):
                for b in system.bound_addresses(a.read_text())[1]:
                    ip = b.address
                    if b.interface == "kube-ipvs0" or ip.is_loopback or ip.is_link_local or ip.is_multicast:
                        continue
                    out.setdefault(ip, b.interface)
        return out

    def _override_name(self) -> str | None:
        """kube-proxy's effective --hostname-override/hostnameOverride, from its argv, log and
        config file (the cluster's objects are not read yet while the node is chosen)."""
        s = self._kube_proxy_config(objects=False).setting("hostnameOverride")
        value = str(s.value).strip() if s.value is not None else ""
        return value if s.origin in ("flag", "config") and value else None

    @cached_property
    def processes(self) -> list[system.Process]:
        out: list[system.Process] = []
        for a in self.of(Kind.PROCESSES):
            out.extend(system.read_processes(a.text, a.first_line, a.attrs))
        return out

    @cached_property
    def listing_netns(self) -> str | None:
        """The network namespace a process listing was taken in: the one its own ``ps -o ...netns``
        row runs in (the node's, for a live collection); None when the listing does not say."""
        for p in self.processes:
            if p.netns and p.program == "ps" and "netns" in p.command:
                return p.netns
        return None

    def in_listing_netns(self, p: system.Process) -> bool:
        """Whether ``p`` runs in the network namespace the listing was taken in (or that is not
        known): a kube-proxy in another one programs another node's rules (kind's nodes on one
        host, a nested cluster)."""
        here = self.listing_netns
        return here is None or not p.netns or p.netns == here

    def process_artifact(self) -> str:
        arts = self.of(Kind.PROCESSES)
        return arts[0].name if arts else "processes"

    @cached_property
    def packages(self) -> list[tuple[system.Package, Cite]]:
        """The node's packages and versions (`rpm -q`, `dpkg -s`, `dpkg -l`); an image's are not."""
        out: list[tuple[system.Package, Cite]] = []
        for a in self.of(Kind.PACKAGES):
            if a.attrs.get("scope", "host") != "host":
                continue
            pkgs = system.parse_packages(a.text, a.first_line, a.attrs.get("package"))
            out.extend((pkg, Cite(a.name, pkg.line, pkg.text)) for pkg in pkgs)
        return out

    @cached_property
    def rhel_release(self) -> tuple[str, Cite] | None:
        """The RHEL (or rebuild) major release the node's rpm release tags name (`.el7`)."""
        return next(((pkg.el, c) for pkg, c in self.packages if pkg.el), None)

    @cached_property
    def line_counts(self) -> list[tuple[LineCount, Artifact]]:
        """Counts that pasted pipelines printed (`... | grep X | wc -l`), with their commands."""
        out = []
        for a in self.of(Kind.LINE_COUNT):
            c = parse_line_count(a.read_text(), a.attrs.get("command", ""), a.first_line)
            if c is not None:
                out.append((c, a))
        return out

    @cached_property
    def waited_lookups(self) -> list[tuple[WaitedLookup, Cite]]:
        """Name lookups that answered only after the resolver sent a query again, each with its line."""
        return [
            (w, Cite(a.name, a.first_line + w.line, w.text))
            for a in self.of(Kind.LOOKUP_TIMING)
            for w in waited_lookups(a.read_text(), a.attrs.get("command"))
        ]

    @cached_property
    def connect_times(self) -> list[tuple[ConnectTimes, Cite]]:
        """Load tests' connect-time summaries (ab, hey), each with the line it is read from."""
        return [
            (ct, Cite(a.name, a.first_line + ct.line, ct.text))
            for a in self.of(Kind.CONNECT_TIMES)
            for ct in connect_times(a.read_text())
        ]

    @cached_property
    def ssh_attempts(self) -> list[tuple[SshAttempt, Cite]]:
        """ssh commands with an address as target (and what they printed), with their lines."""
        out = []
        for a in self.of(Kind.SSH_ATTEMPTS):
            cmd = a.attrs.get("command")
            for t in ssh_attempts(a.read_text(), cmd):
                line = a.first_line + t.line if t.line >= 0 else None
                out.append((t, Cite(a.name, line, t.command if t.line >= 0 else f"$ {t.command}")))
        return out

    def records(self, shape: EvidenceShape[R]) -> list[tuple[R, Cite]]:
        """What a registered shape's parser reads from every artifact of its kind, in order, each
        record cited at its line (read once per shape)."""
        got = self._records.get(shape.kind)
        if got is None:
            got = self._records[shape.kind] = [
                (r, Cite(a.name, r.line, r.text))
                for a in self.of(shape.kind)
                for r in shape.parse(a.read_text(), a.first_line)
            ]
        return got

    @cached_property
    def locks(self) -> list[tuple[system.FileLock, str]]:
        out: list[tuple[system.FileLock, str]] = []
        for a in self.of(Kind.LOCKS):
            out.extend((lk, a.name) for lk in system.parse_locks(a.text, a.first_line))
        return out

    @cached_property
    def modules(self) -> set[str] | None:
        """The loaded modules, from complete listings only (a module not in it is not loaded as a
        module, but may be built into the kernel: see :meth:`module_inactive`); None when no
        complete listing was given."""
        complete = [m.names for a, m in self._module_listings if a.attrs.get("fragment") != "true" and m.whole]
        return set().union(*complete) if complete else None

    def module_inactive(self, name: str, settings: str | None = None, options: tuple[str, ...] = ()) -> bool | None:
        """Whether the kernel lacks ``name``: True only with proof (a complete module listing
        without it and, for a module that registers settings under the prefix ``settings``, a
        complete sysctl listing without them: a built-in module is not in /proc/modules but its
        settings are there; or the kernel's configuration without ``options``, those that build
        it); False when a listing, its settings or the configuration (built in) show it; None:
        unknown."""
        if name in self.modules_seen or (settings and self.node_state.shows(settings)):
            return False
        built = self.kernel_option(*options)[0] if options else None
        if built == "n":
            return True
        if built == "y":
            return False
        if self.modules is None:
            return None
        if settings is None:
            return True
        return True if self.node_state.absent(settings) is not None else None

    @cached_property
    def kernel_options(self) -> dict[str, tuple[kernel_config.KernelOption, Cite]]:
        """Each kernel option the evidence shows (its last showing), by name."""
        return {o.name: (o, c) for o, c in self.records(kernel_config.SHAPE)}

    @cached_property
    def _whole_kernel_config(self) -> Cite | None:
        """The first line of a whole kernel config file given, if one was: an option it does
        not list is not built."""
        return next((c for o, c in self.records(kernel_config.SHAPE) if o.whole), None)

    def kernel_option(self, *names: str) -> tuple[str | None, Cite | None]:
        """How the kernel was built with the first of these options it was built with (or,
        when none, with the first shown): "y", "m" or "n" (not built: shown so, or left out of a
        whole config file), with the line that says it; (None, None) when nothing says."""
        shown = [self.kernel_options[n] for n in names if n in self.kernel_options]
        built = next(((o.value, c) for o, c in shown if o.built), None)
        if built is not None:
            return built
        if shown and len(shown) == len(names):
            return shown[0][0].value, shown[0][1]
        whole = self._whole_kernel_config  # none of them built; those not shown are not in it
        if whole is not None and names:
            return "n", shown[0][1] if shown else whole
        return None, None

    @cached_property
    def modules_seen(self) -> set[str]:
        """Modules any listing shows loaded, a grep'd `lsmod | grep X` too (absence proves nothing)."""
        return set().union(*(mods.names for _a, mods in self._module_listings))

    @cached_property
    def _module_listings(self) -> list[tuple[Artifact, system.Modules]]:
        return [(a, system.parse_modules(a.text)) for a in self.of(Kind.MODULES)]

    # -- versions -----------------------------------------------------------------------
    @cached_property
    def kernel(self) -> Versioned[KernelVersion] | None:
        for a in self.of(Kind.UNAME):
            if a.attrs.get("scope", "host") == "container":
                continue  # `docker run IMAGE uname -r` still prints the host's kernel, but not always knowingly
            v = system.parse_uname(a.text)
            if v:
                return Versioned(v, _first_line_cite(a))
        for a in self.of(Kind.OS_RELEASE):  # `hostnamectl` and neofetch name the running kernel
            if a.attrs.get("scope", "host") == "host" and (got := system.sysinfo_kernel(a.text)) is not None:
                line = a.text.splitlines()[got[1]].strip()
                return Versioned(got[0], Cite(a.name, a.first_line + got[1], line))
        return None

    def node_info(self, field: str) -> tuple[str, Cite] | None:
        """``status.nodeInfo.<field>`` of this node's Node object (``osImage``, ``kernelVersion``),
        cited: what `kubectl get node -o yaml` tells when nobody ran a command on the node. Without
        the object, a `kubectl get nodes -o wide` row: this node's, else the value every row has
        (one kernel on every node is this node's too)."""
        node = self.node_object
        if node is None:
            return self._table_node_info(field)
        value = _node_info(node, field)
        if not value:
            return None
        return value, Cite(node.artifact, node.line, f"{node.ref} status.nodeInfo.{field}: {value}")

    def _table_node_info(self, field: str) -> tuple[str, Cite] | None:
        rows = self.table_objects.of("Node")
        if self.node is not None:
            rows = [r for r in rows if r.name == self.node.name] or rows
        values = {v for r in rows if (v := _node_info(r, field))}
        if len(values) != 1:
            return None
        row = next(r for r in rows if _node_info(r, field))
        value = values.pop()
        return value, self.object_cite(row, f"Node {row.name} {field}: {value}")

    def object_cite(self, obj: K8sObject, text: str) -> Cite:
        """Where an object says something: its line with ``text``, or for an object read from a
        `kubectl get` table, its row as the user pasted it."""
        if obj.fragment == kubectl_table.TABLE_ROW:
            for a in self.of(Kind.KUBECTL_TABLE):
                lines = a.read_text().splitlines()
                if a.name == obj.artifact and obj.line is not None and 0 <= obj.line - a.first_line < len(lines):
                    return Cite(a.name, obj.line, lines[obj.line - a.first_line].strip())
        return Cite(obj.artifact, obj.line, text)

    @cached_property
    def host_iptables(self) -> HostIptables | None:
        """The iptables backend the node's own iptables (kubelet's) uses, and how that is known."""
        return iptables_variant.host_iptables(self)

    @property
    def node_kernel(self) -> Versioned[KernelVersion] | None:
        """The node's kernel: ``uname``, else the Node object's ``status.nodeInfo.kernelVersion``
        (what `kubectl get node -o yaml` shows when nobody ran uname)."""
        return self.kernel or self.node_info_kernel

    def chain_rule(self, chain: str, family: int) -> Cite | None:
        """The first rule of ``chain`` in the rules given for one IP family (is the chain there?)."""
        for rs in self.rulesets:
            if rs.family != family:
                continue
            for r in rs.in_chains({chain}):
                return Cite(rs.artifact, r.line, r.text.strip())
        return None

    @cached_property
    def node_info_kernel(self) -> Versioned[KernelVersion] | None:
        """The kernel release the Node object reports (the kubelet read it on the node)."""
        got = self.node_info("kernelVersion")
        v = KernelVersion.parse(got[0]) if got else None
        return Versioned(v, got[1]) if v is not None and got else None

    @cached_property
    def os_release(self) -> tuple[dict[str, str], Cite] | None:
        for a in self.of(Kind.OS_RELEASE):
            if a.attrs.get("scope", "host") != "host":
                continue  # an image's /etc/os-release is the image's, not the node's
            d = system.parse_os_release(a.text)
            if d:
                line = next(
                    (
                        i
                        for i, ln in enumerate(a.text.splitlines())
                        if ln.strip().startswith(("PRETTY_NAME=", "Description:", "Operating System:", "OS:"))
                    ),
                    0,
                )
                return d, Cite(a.name, a.first_line + line, a.text.splitlines()[line] if a.text else "")
        return None

    def iptables_version(self, scope: str = "host") -> Versioned[IptablesVersion] | None:
        """iptables version of the host (``scope='host'``) or of kube-proxy's image."""
        for v, a in self.iptables_versions(scope):
            if a.attrs.get("scope", "host") == scope:
                return v
        return None

    def iptables_versions(self, *scopes: str) -> list[tuple[Versioned[IptablesVersion], Artifact]]:
        """Every `iptables --version` of these scopes ("host", "kube-proxy", or "other": any
        other container or image), not only the first: a transcript may hold several."""
        out = []
        for a in self.of(Kind.IPTABLES_VERSION):
            scope = a.attrs.get("scope", "host")
            if (scope if scope in ("host", "kube-proxy") else "other") not in scopes:
                continue
            v = system.parse_iptables_version(a.text)
            if v is not None:
                out.append((Versioned(v, _first_line_cite(a)), a))
        return out

    @cached_property
    def kube_proxy_version(self) -> Versioned[KubeVersion] | None:
        """From ``kube-proxy --version``, its log, or its image tag; never from
        ``Node.status.nodeInfo.kubeProxyVersion`` (that is the kubelet's version)."""
        return self._kube_proxy_version()

    def _kube_proxy_version(self, objects: bool = True) -> Versioned[KubeVersion] | None:
        for a in self.of(Kind.KUBE_PROXY_VERSION):
            v = system.parse_kube_proxy_version(a.text)
            if v:
                return Versioned(v, _first_line_cite(a))
        for h in reversed(self.log.hits(VERSION_GLOG.id, VERSION_STRUCTURED.id)):
            v = KubeVersion.parse("v" + (h.groups[0] or "").lstrip("v"))
            if v:
                return Versioned(v, Cite(h.artifact, h.line, h.text))
        for obj in self.kube_proxy_pods + self.kube_proxy_workloads if objects else []:
            for c in containers_of(obj):
                image = str(c.get("image") or "")
                if ":" in image.rsplit("/", 1)[-1]:
                    tag = image.rsplit(":", 1)[1]
                    v = KubeVersion.parse(tag)
                    if v:
                        return Versioned(v, Cite(obj.artifact, obj.line, f"{obj.ref} image: {image}"))
        return None

    # -- kube-proxy configuration --------------------------------------------------------
    @cached_property
    def kp_config(self) -> KubeProxyConfig:
        return self._kube_proxy_config()

    def _kube_proxy_config(self, objects: bool = True) -> KubeProxyConfig:
        """kube-proxy's flags and config file with their real precedence; ``objects``: also from
        its Pod, DaemonSet and ConfigMap (not while the node is chosen, before they are read)."""
        cfg = KubeProxyConfig()
        kpv = self._kube_proxy_version(objects)
        cfg.version = kpv.value if kpv else None
        flags = self._flags_from_argv(objects)
        if flags:
            cfg.flags = flags
        else:
            cfg.flags = self._flags_from_log()
            cfg.flags_from_log = bool(cfg.flags)
        for a in self.of(Kind.KUBE_PROXY_CONFIG):
            cfg.file = kpconfig.parse_config_file(a.text, a.name, a.first_line)
            if objects and cfg.file is not None:  # why a config was refused (an alias bomb, bad YAML)
                self.diagnostics += [(a.name, d) for d in cfg.file.diagnostics]
            break
        if cfg.file is None and objects:
            for cm in self.objects.of("ConfigMap"):
                if not is_kube_proxy_workload(cm):
                    continue
                for key, val in (cm.body.get("data") or {}).items():
                    # (by its kind, or by its apiVersion where the paste ends before `kind:`)
                    if isinstance(val, str) and ("KubeProxyConfiguration" in val or "kubeproxy.config.k8s.io" in val):
                        cfg.file = kpconfig.parse_config_file(val, cm.artifact, 1)
                        if cfg.file is not None:
                            # the embedded document has no lines of its own in the user's file
                            cfg.file.text = ""
                            cfg.file.source = Source(cm.artifact, cm.line, f"{cm.ref} data[{key}]")
                        break
        return cfg

    def _flags_from_argv(self, objects: bool = True) -> dict[str, FlagValue]:
        """kube-proxy's flags from its command line: the cmdline file, the process list, its Pod
        or DaemonSet (``objects``: not while the node is chosen, before the objects are read), or
        k3s's start line."""
        for a in self.of(Kind.KUBE_PROXY_CMDLINE):
            cmd = kpconfig.read_cmdline(a.text)
            if objects:
                self.diagnostics += [(a.name, d) for d in cmd.diagnostics]
            argv = cmd.argv
            args = kpconfig.kube_proxy_args(argv)
            if args is None:
                args = argv[1:] if argv else []
            src = Source(a.name, a.first_line, " ".join(argv)[:300])
            return kpconfig.parse_argv(args, src)
        for p in self.processes:
            args = kpconfig.kube_proxy_args(p.argv) if self.in_listing_netns(p) else None
            if args is not None:
                return kpconfig.parse_argv(args, Source(self.process_artifact(), p.line, p.command[:300]))
        for obj in self.kube_proxy_pods + self.kube_proxy_workloads if objects else []:
            for c in containers_of(obj):
                argv = [str(x) for x in _list(c.get("command"))] + [str(x) for x in _list(c.get("args"))]
                args = kpconfig.kube_proxy_args(argv)
                if args is None and any(x.startswith("--") for x in argv):
                    args = [x for x in argv if x.startswith("-")]
                if args:
                    return kpconfig.parse_argv(
                        args, Source(obj.artifact, obj.line, f"{obj.ref}: {' '.join(argv)[:300]}")
                    )
        for h in self.log.hits(K3S_RUNNING.id):
            args = kpconfig.read_cmdline(h.groups[0] or "").argv
            return kpconfig.parse_argv(args, Source(h.artifact, h.line, h.text))
        return {}

    def _flags_from_log(self) -> dict[str, FlagValue]:
        out: dict[str, FlagValue] = {}
        for h in self.log.hits(FLAG.id):
            name, value = h.groups[0] or "", h.groups[1] or ""
            defaults = kpconfig.FLAG_DEFAULTS.get(name)
            explicit = value not in defaults if defaults is not None else value not in ("", "false", "0", "[]")
            out[name] = FlagValue(name, value, Source(h.artifact, h.line, h.text), explicit)
        return out

    def _claimed_mode(self) -> tuple[str, Cite | None] | None:
        """The proxy mode kube-proxy says it runs (log) or is configured with (RunningMode.claimed)."""
        logged = self._logged_mode(PROXY_MODE) or self._served_mode
        if logged is not None:
            return logged
        configured = self._configured_mode
        if configured is not None:
            return configured
        if self.kp_config.setting("mode").origin == "default" and (self.kp_config.flags or self.kp_config.file):
            return "iptables", None
        return None

    def _logged_mode(self, *readings: Messages) -> tuple[str, Cite] | None:
        """The mode the last of these log lines names (the first reading that has lines)."""
        if not self.log_artifacts:  # (the readings' ids would read the catalogue for nothing)
            return None
        for reading in readings:
            hits = self.log.hits(*reading.ids)
            if hits:
                h = hits[-1]
                return (mode_of(h) or "iptables"), Cite(h.artifact, h.line, h.text)
        return None

    @cached_property
    def _served_mode(self) -> tuple[str, Cite] | None:
        """The mode kube-proxy's metrics server answers on ``/proxyMode``: the one its proxier
        runs, after any fallback (as its "Using ipvs Proxier" line says)."""
        for a in self.of(Kind.KUBE_PROXY_MODE):
            got = parse_proxy_mode(a.text, a.first_line)
            if got is not None:
                return got[0], Cite(a.name, got[1], got[2])
        return None

    @cached_property
    def _configured_mode(self) -> tuple[str, Cite | None] | None:
        s = self.kp_config.setting("mode")
        if s.origin in ("flag", "config") and s.value:
            src = s.source
            return str(s.value), (Cite(src.artifact, src.line, src.text) if src else None)
        return None

    @cached_property
    def running_mode(self) -> modes.RunningMode:
        """The proxy-mode answer: the mode kube-proxy really runs in, from its log, the state each
        mode leaves on the node, its configuration, or the default, with how that is known and
        what kube-proxy itself claims (:mod:`kpdoctor.dataplane.modes`)."""
        logged = self._logged_mode(PROXY_MODE, SYNC_MODE)
        rulesets = [rs for rs in self.rulesets if rs.form in ("save", "S", "fragment")]
        states = modes.iptables_states(rulesets)
        ipvs = modes.ipvs_state(self.ipvs_virtual_servers, [(a.name, ln) for a, ln in self.node_state.links])
        ipvs = ipvs or self._ipvs_interface_in_addresses()
        nftables = modes.nftables_state(self.nft_tables)
        states += [s for s in (ipvs, nftables) if s is not None]
        known = bool(self.kp_config.flags or self.kp_config.file) or bool(rulesets)
        running = modes.running_mode(logged, self._configured_mode, states, known, self._served_mode)
        running.claimed = self._claimed_mode()
        return running

    def _ipvs_interface_in_addresses(self) -> modes.ModeState | None:
        for a in self.of(Kind.IP_ADDR):
            for i, line in enumerate(a.read_text().splitlines()):
                if modes.IPVS_INTERFACE in line:
                    what = f"the {modes.IPVS_INTERFACE} interface ({a.name})"
                    return modes.ModeState("ipvs", what, Cite(a.name, a.first_line + i, line.strip()[:300]))
        return None

    @cached_property
    def ipvs_virtual_servers(self) -> list[tuple[VirtualServer, str]]:
        """``ipvsadm -Ln``/``-Sn`` virtual servers, each with the artifact it is in. A virtual server
        in several listings (a bundle has both) is taken from the first, ``-Ln`` before ``-Sn``
        (it also shows the connection counts)."""
        return _first_of_each(self._ipvs_listings)

    def ipvs_evaluated(self) -> list[tuple[VirtualServer, str]]:
        """The virtual servers verification evaluates: those of whole listings. A grep'd listing's
        (no column header) says what it shows, never that a virtual server is absent; with no
        whole listing, verification is not evaluated in IPVS mode (as for rules fragments)."""
        return _first_of_each([(a, vss) for a, vss in self._ipvs_listings if a.attrs.get("fragment") != "true"])

    @cached_property
    def ipvs_listed(self) -> list[tuple[VirtualServer, str]]:
        """Every virtual server of every ``ipvsadm`` listing, ``-Ln`` before ``-Sn``: the same one
        listed twice (a transcript's snapshots) is there twice, with its counts then."""
        return [(vs, a.name) for a, vss in self._ipvs_listings for vs in vss]

    @cached_property
    def _ipvs_listings(self) -> list[tuple[Artifact, list[VirtualServer]]]:
        """Each ``ipvsadm`` listing parsed once, ``-Ln`` before ``-Sn``."""
        # (`ipvsadm -Ln --timeout` lists no virtual server: it is no listing of them)
        ipvsadm = [a for a in self.of(Kind.IPVSADM) if a.attrs.get("format") != "timeout"]
        listings = sorted(ipvsadm, key=lambda a: a.attrs.get("format") == "save")
        return [(a, parse_ipvsadm_list(a.text, a.first_line)) for a in listings]

    @cached_property
    def ipvs_timeouts(self) -> tuple[Timeouts, str] | None:
        """IPVS's connection timeouts (``ipvsadm -L --timeout``), with the artifact they are in."""
        for a in self.of(Kind.IPVSADM):
            t = parse_timeouts(a.text, a.first_line)
            if t is not None:
                return t, a.name
        return None

    @cached_property
    def ipsets(self) -> dict[str, IpSet]:
        """Every ipset of ``ipset save`` / ``ipset list`` output (the first listing of a name wins)."""
        out: dict[str, IpSet] = {}
        for a in self.of(Kind.IPSET):
            for name, s in parse_ipsets(a.read_text(), a.first_line).items():
                s.artifact = a.name
                out.setdefault(name, s)
        return out

    def local_addresses(self, mode: str | None) -> list[IPAddress]:
        """The addresses the node takes as its own in ``mode`` (``--dst-type LOCAL``, ``fib daddr
        type local``): its own, and in IPVS mode what kube-ipvs0 holds (every ClusterIP when the
        evidence does not show kube-ipvs0)."""
        m = modes.mode_named(mode)
        if m is not None and m.name == "ipvs" and self.kube_ipvs0 is not None:
            # what kube-ipvs0 really holds: an address missing there is one IPVS never sees
            return self.node_view.local() + self.kube_ipvs0
        return local_addresses(self.node_view, self.verified_services(), m.deviations if m else SHARED)

    def verified_services(self) -> list[K8sObject]:
        """The Services the node's rules are verified against: the objects, then the rows of
        `kubectl get svc` tables no object names (their endpoints unknown: only a Service port
        the rules leave untouched is judged, dataplane/verify.py)."""
        return self.cluster.service_objects()

    @cached_property
    def kube_ipvs0(self) -> list[IPAddress] | None:
        """Addresses bound on kube-ipvs0 (``ip addr``), or None when no output shows it."""
        found: list[IPAddress] | None = None
        for a in self.of(Kind.IP_ADDR) + self.of(Kind.IP_LINK):
            got = system.interface_addresses(a.read_text(), modes.IPVS_INTERFACE)
            if got is not None:
                found = (found or []) + [x for x in got if x not in (found or [])]
        return found

    @cached_property
    def nft_tables(self) -> list[tuple[nft.NftTable, str]]:
        """nftables tables (``nft list ruleset``, text or JSON), each with the artifact it is in.
        A JSON listing is summed up from its compiled tables (a large node's is read once, for
        this and for the verification); a text listing by its lines."""
        out = [(t.summary(), a.name) for a, tables in self._nft_json for t in tables]
        for a in self.of(Kind.NFT_RULESET_TEXT):
            part = a.attrs.get("fragment") == "true"
            out += [(t, a.name) for t in nft.parse_tables(a.read_text(), a.first_line, part)]
        return out

    @cached_property
    def cni_configs(self) -> list[tuple[CniConfig, str]]:
        """The CNI network configurations given, each with its artifact."""
        out = []
        for a in self.of(Kind.CNI_CONFIG):
            c = parse_cni_config(a.read_text(), a.first_line)
            if c is not None:
                out.append((c, a.name))
        return out

    def nft_map_elements(self, name: str | None = None) -> list[tuple[nft.MapElement, str]]:
        """The elements of the maps (map ``name`` only, when given) of every nftables listing
        (text, a part of one, or JSON), each with its artifact."""
        names = frozenset({name}) if name is not None else None
        out = [
            (e, a.name)
            for a, tables in self._nft_json
            for t in tables
            for e in t.map_elements(a.first_line)
            if names is None or e.map in names
        ]
        for a in self.of(Kind.NFT_RULESET_TEXT):
            out += [(e, a.name) for e in nft.map_elements(a.read_text(), a.first_line, names)]
        return out

    @cached_property
    def _nft_json(self) -> list[tuple[Artifact, list[NftTableRules]]]:
        return [(a, compile_listing(a.name, a.read_text(), a.first_line)) for a in self.of(Kind.NFT_RULESET)]

    @cached_property
    def nft_rules(self) -> list[NftTableRules]:
        """Every nftables table of the listings, compiled for evaluation (a table listed both as
        JSON and as text is read from the JSON)."""
        out: list[NftTableRules] = []
        seen: set[tuple[str, str]] = set()
        listings = [tables for _, tables in self._nft_json]
        # (a part of a table is never evaluated: what the rest of the table holds is unknown)
        whole = [a for a in self.of(Kind.NFT_RULESET_TEXT) if a.attrs.get("fragment") != "true"]
        listings += [compile_listing(a.name, a.read_text(), a.first_line) for a in whole]
        for tables in listings:
            for t in tables:
                if (t.family, t.name) not in seen:
                    seen.add((t.family, t.name))
                    out.append(t)
        return out

    # -- the data plane -----------------------------------------------------------------
    @cached_property
    def node_object(self) -> K8sObject | None:
        return self._node_choice[1]

    @cached_property
    def node_view(self) -> NodeView:
        """The node's name, addresses (primary first), zone and pod network, from the evidence."""
        ident = self.node
        addrs: dict[int, list[IPAddress]] = {}
        zone = None
        obj = self.node_object
        if obj is not None:
            for ip in node_ips(obj):
                addrs.setdefault(ip.version, []).append(ip)
            labels = k8s.as_dict(k8s.as_dict(obj.body.get("metadata")).get("labels"))
            z = labels.get(ZONE_LABEL) or labels.get("failure-domain.beta.kubernetes.io/zone")
            zone = z if isinstance(z, str) else None
        for ip in self.host_addresses:
            if ip not in addrs.setdefault(ip.version, []):
                addrs[ip.version].append(ip)
        setting = self.kp_config.setting("clusterCIDR")
        cidrs = networks(str(setting.value or "").split(","))
        cidrs += [c for c in (pod_cidrs(obj) if obj is not None else []) if c not in cidrs]
        why = self._node_choice[2]
        return NodeView(ident.name if ident else None, addrs, zone, cidrs, why)

    @cached_property
    def host_addresses(self) -> list[IPAddress]:
        """Addresses from ``ip -j addr`` (global scope first) or ``ip -br addr`` (the node's own
        first: not loopback or link-local; never kube-ipvs0's, which are Services')."""
        out: list[IPAddress] = []
        for a in self.of(Kind.IP_ADDR):
            if a.text.lstrip().startswith("["):
                out.extend(system.parse_ip_addr(a.text))
                continue
            bound = [b.address for b in system.bound_addresses(a.text)[1] if b.interface != modes.IPVS_INTERFACE]
            out.extend(sorted(bound, key=lambda ip: ip.is_loopback or ip.is_link_local))
        return out

    @cached_property
    def node_state(self) -> NodeState:
        """Sysctls, counters, listeners, links, kernel log and conntrack entries (seed 004)."""
        return NodeState(self)

    @cached_property
    def feature_gates(self) -> dict[str, bool]:
        gates: dict[str, bool] = {}
        s = self.kp_config.setting("featureGates")
        val = s.value
        if isinstance(val, dict):
            gates.update({str(k): bool(v) for k, v in val.items()})
        elif isinstance(val, str):
            for part in val.split(","):
                k, _, v = part.partition("=")
                if k.strip():
                    gates[k.strip()] = v.strip().lower() == "true"
        return gates

    def dataplane_inputs(self) -> DataplaneInputs:
        """What the dataplane reads of this evidence (dataplane/session.py), each part worked out
        when the dataplane first asks for it, in the process that asks."""
        rules = self.of(Kind.IPTABLES_SAVE) + self.of(Kind.NFT_RULESET) + self.of(Kind.NFT_RULESET_TEXT)
        return DataplaneInputs(
            services=self.verified_services,
            slices=lambda: self.objects.of("EndpointSlice"),
            endpoints=lambda: self.cluster.endpoint_objects(),
            pods=lambda: self.objects.of("Pod"),
            endpoints_exported=self._endpoints_exported,
            rulesets=lambda: self.rulesets,
            nft_tables=lambda: self.nft_tables,
            nft_rules=lambda: self.nft_rules,
            ipvs=self.ipvs_evaluated,
            ipsets=lambda: self.ipsets,
            running=lambda: self.running_mode,
            node=lambda: self.node_view,
            local_addresses=self.local_addresses,
            behaviour=self._behaviour,
            rule_texts=self._rule_texts,
            artifact_lines=self._artifact_lines,
            rules_size=sum(a.size or len(a.text) for a in rules),
            iptables_size=sum(a.size or len(a.text) for a in self.of(Kind.IPTABLES_SAVE)),
            reuse=self.reuse,
        )

    def _endpoints_exported(self) -> bool:
        """Services exported together with other objects (Nodes, Pods...), or a bundle's
        endpointslices file: a Service without EndpointSlices there has none. Not when the
        collection says it could not read them (a list that failed, a watch not synced yet):
        their absence is then unknown, never "no endpoints"."""
        names = ("endpointslices.json", "endpoints.json")
        exported = any(a.name.endswith(names) for a in self.of(Kind.K8S_OBJECTS))
        if not exported and any(path.endswith(names) for path in self.evidence.not_collected):
            return False
        return exported or any(o.kind not in ("Service", "ConfigMap") for o in self.objects.items)

    def _behaviour(self) -> Behaviour:
        kpv = self.kube_proxy_version
        return Behaviour.of(kpv.value if kpv else None, self.feature_gates)

    def _rule_texts(self) -> list[str]:
        kinds = (Kind.IPTABLES_SAVE, Kind.NFT_RULESET, Kind.NFT_RULESET_TEXT, Kind.IPVSADM, Kind.IPSET)
        return [f"{a.name}\n{a.read_text()}" for kind in kinds for a in self.of(kind)]

    def _artifact_lines(self, name: str) -> Iterator[tuple[int, str]]:
        for a in self.evidence.artifacts:
            if a.name == name:
                yield from enumerate(a.read_text().splitlines(), a.first_line)


def _table_named(a: Artifact) -> str | None:
    """The table the command that printed the rules named (``iptables -t nat -S``), if any."""
    m = re.search(r"(?:^|\s)(?:-t\s*|--table[=\s])(\w+)", a.attrs.get("command", ""))
    return m.group(1) if m else None


# Kinds whose parse can yield nothing although the file was recognised, and the reason the user
# sees. Not every kind: an empty iptables-save of one backend is evidence (no rules there), and so
# is an ss listing with only its header (nothing listens).
_NOTHING: dict[Kind, tuple[Callable[[Facts], bool], str]] = {
    Kind.K8S_OBJECTS: (
        lambda f: not f.objects.items,
        "it holds no object (an empty List: the wrong context or namespace?)",
    ),
    Kind.IP_ADDR: (lambda f: not f.host_addresses, "no address could be read from it"),
    Kind.IP_LINK: (lambda f: not f.node_state.links, "no interface could be read from it"),
    Kind.SYSCTL: (lambda f: not f.node_state.sysctls, "no setting could be read from it"),
    Kind.KUBE_PROXY_CONFIG: (
        lambda f: (
            not any(
                (cf := kpconfig.parse_config_file(a.text, a.name, a.first_line)) is not None and cf.data
                for a in f.of(Kind.KUBE_PROXY_CONFIG)
            )
        ),
        "no setting could be read from it",
    ),
}

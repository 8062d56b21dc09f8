"""KP312 stale-udp-conntrack on real ``conntrack`` output.

The entries are inserted with the conntrack binary (``conntrack -I``) into a throw-away network
namespace (tests/lab/netns.py) and listed there with ``conntrack -L -p udp`` (and ``-o extended``),
then read with the Services and EndpointSlices as ``kubectl get -o json`` prints them. An inserted
entry is what the kernel holds for a client's flow: ``-u SEEN_REPLY,ASSURED`` is a flow its backend
answered, no status an unanswered one ([UNREPLIED]), and a reply source equal to the original
destination a flow that was never translated. ``conntrack -U -t 30`` does what the client's next
packet does to an unanswered entry: sets its timeout again. The lab tests skip without root, the
lab's binaries or a kernel that lets ``conntrack -I`` insert; the tests on the captured copies
(tests/data/node/conntrack-L-udp-*.txt, see SOURCES.md there) run anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import none_of, one
from lab.netns import Netns, conntrack_unavailable

from kpdoctor.demo import demo_path
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Confidence, Finding, Report, Severity
from kpdoctor.parse.conntrack import parse_conntrack_entries

NODE = Path(__file__).resolve().parents[1] / "data" / "node"


@dataclass(frozen=True)
class Svc:
    namespace: str
    name: str
    ip: str
    port: int
    port_name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


DNS = Svc("kube-system", "kube-dns", "10.96.0.10", 53, "dns")
STATSD = Svc("monitoring", "statsd", "10.96.112.40", 8125, "metrics")


@dataclass(frozen=True)
class Flow:
    """A client's UDP flow to a Service: ``backend`` is where it was translated to (the reply's
    source), the Service address itself when it never was."""

    client: str
    sport: int
    svc: Svc
    backend: str
    answered: bool = False
    timeout: int = 30

    def insert(self) -> list[str]:
        argv = [
            "conntrack", "-I", "-p", "udp", "-s", self.client, "-d", self.svc.ip,
            "--sport", str(self.sport), "--dport", str(self.svc.port),
            "-r", self.backend, "-q", self.client,
            "--reply-port-src", str(self.svc.port), "--reply-port-dst", str(self.sport),
            "-t", str(self.timeout),
        ]  # fmt: skip
        return argv + (["-u", "SEEN_REPLY,ASSURED"] if self.answered else [])

    def refresh(self) -> list[str]:
        """What the client's next packet does to the entry: its timeout set again."""
        return [
            "conntrack", "-U", "-p", "udp", "-s", self.client, "-d", self.svc.ip,
            "--sport", str(self.sport), "--dport", str(self.svc.port), "-t", "30",
        ]  # fmt: skip


def service(s: Svc, lb_ip: str | None = None, node_port: int | None = None) -> dict[str, object]:
    port: dict[str, object] = {"name": s.port_name, "port": s.port, "protocol": "UDP", "targetPort": s.port}
    if node_port is not None:
        port["nodePort"] = node_port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": s.name, "namespace": s.namespace, "resourceVersion": "1201"},
        "spec": {
            "clusterIP": s.ip,
            "clusterIPs": [s.ip],
            "externalTrafficPolicy": "Cluster",
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ports": [port],
            "selector": {"app": s.name},
            "sessionAffinity": "None",
            "type": "LoadBalancer" if lb_ip else "NodePort" if node_port else "ClusterIP",
        },
        "status": {"loadBalancer": {"ingress": [{"ip": lb_ip, "ipMode": "VIP"}]} if lb_ip else {}},
    }


def services(*svcs: Svc | dict[str, object]) -> str:
    """``kubectl get svc -A -o json``."""
    items = [service(s) if isinstance(s, Svc) else s for s in svcs]
    return json.dumps(
        {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}, indent=4
    )


def slices(endpoints: dict[Svc, list[str]]) -> str:
    """``kubectl get endpointslices -A -o json``: each Service's one slice and its ready endpoints."""
    items = [
        {
            "addressType": "IPv4",
            "apiVersion": "discovery.k8s.io/v1",
            "endpoints": [
                {
                    "addresses": [a],
                    "conditions": {"ready": True, "serving": True, "terminating": False},
                    "nodeName": "node-2",
                    "targetRef": {"kind": "Pod", "name": f"{s.name}-{i}", "namespace": s.namespace},
                }
                for i, a in enumerate(addrs)
            ],
            "kind": "EndpointSlice",
            "metadata": {
                "generateName": f"{s.name}-",
                "labels": {
                    "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                    "kubernetes.io/service-name": s.name,
                },
                "name": f"{s.name}-x7k2p",
                "namespace": s.namespace,
                "resourceVersion": "1388",
            },
            "ports": [{"name": s.port_name, "port": s.port, "protocol": "UDP"}],
        }
        for s, addrs in endpoints.items()
    ]
    return json.dumps(
        {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}, indent=4
    )


def diagnose(tmp_path: Path, files: dict[str, str]) -> Report:
    paths = []
    for name, text in files.items():
        p = tmp_path / name
        p.write_text(text)
        paths.append(p)
    report, _ = diagnose_paths(paths, command="diagnose")
    return report


def kp312(report: Report) -> Finding:
    return one(report, "KP312")


@pytest.fixture
def ns() -> Iterator[Netns]:
    reason = conntrack_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with Netns() as n:
        yield n


def insert(ns: Netns, *flows: Flow) -> None:
    for f in flows:
        res = ns.run(f.insert(), timeout=10)
        if res.returncode != 0:  # nf_conntrack_netlink not loadable here, say
            pytest.skip(f"conntrack -I cannot insert an entry here: {res.stderr.strip()}")


def listing(ns: Netns, *options: str) -> str:
    out = ns.check(["conntrack", "-L", "-p", "udp", *options], timeout=10)
    assert out.strip(), "conntrack -L listed nothing"
    return out


# -- a translated flow whose backend is gone ----------------------------------------------------

SVC_CASES = [
    pytest.param(DNS, Severity.CRITICAL, id="dns"),
    pytest.param(STATSD, Severity.WARNING, id="statsd"),
]


@pytest.mark.parametrize("svc,severity", SVC_CASES)
@pytest.mark.parametrize("options", [(), ("-o", "extended")], ids=["L", "L-extended"])
def test_an_assured_flow_to_a_backend_no_longer_listed_is_reported(
    ns: Netns, tmp_path: Path, svc: Svc, severity: Severity, options: tuple[str, ...]
) -> None:
    insert(ns, Flow("10.244.1.5", 40000, svc, "10.244.2.7", answered=True))
    ct = listing(ns, *options)
    assert "[ASSURED]" in ct and "[UNREPLIED]" not in ct
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(svc), "eps.json": slices({svc: ["10.244.3.9"]})}))
    assert (f.severity, f.confidence) == (severity, Confidence.HIGH)
    assert f"still go to 10.244.2.7, which is not one of {svc.key}'s endpoints" in f.summary
    assert "[ASSURED]" in f.summary and "30+ s later" not in f.summary
    assert [c.line for c in f.evidence] == [1] and "src=10.244.2.7" in f.evidence[0].text
    assert any("--dst-nat 10.244.2.7" in x for x in f.fix)


@pytest.mark.parametrize("svc", [DNS, STATSD], ids=["dns", "statsd"])
def test_the_same_flow_with_its_backend_still_listed_is_nothing(ns: Netns, tmp_path: Path, svc: Svc) -> None:
    insert(ns, Flow("10.244.1.5", 40000, svc, "10.244.2.7", answered=True))
    ct = listing(ns)
    eps = slices({svc: ["10.244.3.9", "10.244.2.7"]})
    none_of(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(svc), "eps.json": eps}), "KP312")


def test_without_the_services_the_slices_still_name_the_flows_service(ns: Netns, tmp_path: Path) -> None:
    """The miss: with conntrack -L and the EndpointSlices only, nothing tied the flow's ClusterIP
    to a Service (the lookup went Service -> ClusterIP -> slices), and an [ASSURED] flow is not the
    unanswered one reported without endpoints: nothing was said."""
    insert(ns, Flow("10.244.1.5", 40000, DNS, "10.244.2.7", answered=True))
    ct = listing(ns)
    eps = slices({DNS: ["10.244.3.9"], STATSD: ["10.244.4.21"]})
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "eps.json": eps}))
    assert (f.severity, f.confidence) == (Severity.CRITICAL, Confidence.MEDIUM)
    assert "not one of kube-system/kube-dns's endpoints" in f.summary
    assert "only Service in the EndpointSlices given whose endpoints take UDP port 53" in f.confidence_reason
    # another flow to the same address that goes to a current endpoint says the same, more firmly
    insert(ns, Flow("10.244.1.6", 41000, DNS, "10.244.3.9", answered=True))
    f = kp312(diagnose(tmp_path, {"ct.txt": listing(ns), "eps.json": eps}))
    assert "another flow to 10.96.0.10:53 goes to 10.244.3.9" in f.confidence_reason
    assert [c.text.count("10.244.2.7") for c in f.evidence] == [1]


@pytest.mark.parametrize("svc", [DNS, STATSD], ids=["dns", "statsd"])
def test_an_unanswered_flow_to_a_backend_no_longer_listed_is_a_medium_warning(
    ns: Netns, tmp_path: Path, svc: Svc
) -> None:
    insert(ns, Flow("10.244.1.7", 51000, svc, "10.244.4.20"))
    ct = listing(ns)
    assert "[UNREPLIED] src=10.244.4.20" in ct
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(svc), "eps.json": slices({svc: ["10.244.4.21"]})}))
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.MEDIUM)
    assert "never answered ([UNREPLIED])" in f.summary
    # without the endpoints: the low-confidence reading of an unanswered translated flow
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(svc)}))
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.LOW)
    assert "EndpointSlices tell" in f.summary


@pytest.mark.parametrize(
    "dst,obj",
    [
        pytest.param("203.0.113.10", service(STATSD, lb_ip="203.0.113.10", node_port=31125), id="load-balancer-ip"),
        pytest.param("192.168.1.10", service(STATSD, node_port=31125), id="node-port"),
    ],
)
def test_a_flow_to_the_services_other_addresses_is_read_too(
    ns: Netns, tmp_path: Path, dst: str, obj: dict[str, object]
) -> None:
    """Only ClusterIPs were looked up: a flow to the load-balancer address or a NodePort was missed."""
    port = 31125 if dst == "192.168.1.10" else STATSD.port
    via = Svc(STATSD.namespace, STATSD.name, dst, port, STATSD.port_name)
    insert(ns, Flow("198.51.100.7", 40000, via, "10.244.4.20", answered=True))
    ct = listing(ns)
    f = kp312(
        diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(obj), "eps.json": slices({STATSD: ["10.244.4.21"]})})
    )
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.HIGH)
    assert f"{dst}:{port} still go to 10.244.4.20, which is not one of monitoring/statsd's endpoints" in f.summary


def test_a_nodeport_number_elsewhere_is_no_services(ns: Netns, tmp_path: Path) -> None:
    """An unanswered, untranslated flow to some host's port 31125 is a NodePort flow only on one of
    the node's addresses; the node's addresses not given, only a translated one is taken as it."""
    remote = Svc("", "", "198.51.100.1", 31125, "")
    insert(ns, Flow("10.244.1.7", 40000, remote, remote.ip))
    files = {"ct.txt": listing(ns), "svc.json": services(service(STATSD, node_port=31125))}
    none_of(diagnose(tmp_path, files), "KP312")


def test_a_service_the_slices_given_list_nothing_for(ns: Netns, tmp_path: Path) -> None:
    """The EndpointSlices given hold none of kube-dns's: it has no endpoints, as verification reads
    such a listing; firm only when its own slices are there."""
    insert(ns, Flow("10.244.1.5", 40000, DNS, "10.244.2.7", answered=True))
    files = {"ct.txt": listing(ns), "svc.json": services(DNS, STATSD), "eps.json": slices({STATSD: ["10.244.4.21"]})}
    f = kp312(diagnose(tmp_path, files))
    assert (f.severity, f.confidence) == (Severity.CRITICAL, Confidence.MEDIUM)
    assert "(the EndpointSlices given list none for it)" in f.summary


# -- a flow never translated ---------------------------------------------------------------------


@pytest.mark.parametrize("svc", [DNS, STATSD], ids=["dns", "statsd"])
def test_a_never_translated_entry_in_one_listing_is_not_critical(ns: Netns, tmp_path: Path, svc: Svc) -> None:
    """Created while no rules existed: it proves only that nothing translated the flow when it
    began, not that the entry stays."""
    insert(ns, Flow("10.244.1.8", 43145, svc, svc.ip))
    ct = listing(ns)
    assert f"[UNREPLIED] src={svc.ip} " in ct
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(svc), "eps.json": slices({svc: ["10.244.3.9"]})}))
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.MEDIUM)
    assert f"were never translated to a backend (the reply would come from {svc.ip} itself" in f.summary
    assert "taken 30+ s later that still shows the same tuple would prove it stuck" in f.summary
    assert "no rules given" in f.summary


def refreshed_listings(ns: Netns, flow: Flow) -> tuple[str, str]:
    """Two listings of one unanswered entry, the client's packet in between."""
    insert(ns, flow)
    first = listing(ns)
    ns.check(flow.refresh(), timeout=10)
    return first, listing(ns)


@pytest.mark.parametrize("svc,severity", SVC_CASES)
def test_the_same_never_translated_entry_kept_between_two_listings_is_stuck(
    ns: Netns, tmp_path: Path, svc: Svc, severity: Severity
) -> None:
    first, second = refreshed_listings(ns, Flow("10.244.1.8", 43145, svc, svc.ip, timeout=10))
    objs = {"svc.json": services(svc), "eps.json": slices({svc: ["10.244.3.9"]})}
    f = kp312(diagnose(tmp_path, {"ct-1.txt": first, "ct-2.txt": second, **objs}))
    assert (f.severity, f.confidence) == (severity, Confidence.HIGH)
    assert "its timeout went up from" in f.summary and "30+ s later" not in f.summary
    assert [c.artifact.rsplit("/", 1)[-1] for c in f.evidence] == ["ct-1.txt", "ct-2.txt"]
    # the same two outputs in one pasted session
    session = f"$ conntrack -L -p udp\n{first}$ sleep 1\n$ conntrack -L -p udp\n{second}"
    f = kp312(diagnose(tmp_path, {"session.txt": session, **objs}))
    assert (f.severity, f.confidence) == (severity, Confidence.HIGH)
    assert [c.line for c in f.evidence] == [2, 5]


def test_two_listings_back_to_back_prove_nothing(ns: Netns, tmp_path: Path) -> None:
    insert(ns, Flow("10.244.1.8", 43145, DNS, DNS.ip))
    first, second = listing(ns), listing(ns)
    f = kp312(diagnose(tmp_path, {"ct-1.txt": first, "ct-2.txt": second, "svc.json": services(DNS)}))
    assert f.severity == Severity.WARNING and "1 UDP flow(s)" in f.summary


def test_a_young_entry_with_its_age_shown_is_not_stuck(ns: Netns, tmp_path: Path) -> None:
    """nf_conntrack_timestamp=1 prints each entry's age (delta-time); a few seconds prove nothing."""
    if ns.run(["sysctl", "-w", "net.netfilter.nf_conntrack_timestamp=1"], timeout=10).returncode != 0:
        pytest.skip("net.netfilter.nf_conntrack_timestamp cannot be set in a network namespace here")
    insert(ns, Flow("10.244.1.8", 43145, DNS, DNS.ip))
    ct = listing(ns)
    assert "delta-time=" in ct
    stamped = listing(ns, "-o", "extended,ktimestamp")  # adds "[start=Sat Nov 28 13:14:22 2026]"
    (e,) = parse_conntrack_entries(stamped)
    assert "[start=" in stamped and e.age is not None and e.age < 30 and e.reply_src == DNS.ip and e.dport == 53
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(DNS)}))
    assert f.severity == Severity.WARNING


# -- what the rules given do now -----------------------------------------------------------------

DEMO = demo_path("config-ignores-hostname")  # a real EKS node's kube-proxy rules; kube-dns is 172.20.0.10


@pytest.mark.parametrize("drop_service_rule", [False, True], ids=["translated-now", "not-translated-now"])
def test_the_rules_given_tell_a_leftover_from_a_service_nothing_translates(
    ns: Netns, tmp_path: Path, drop_service_rule: bool
) -> None:
    kube_dns = Svc("kube-system", "kube-dns", "172.20.0.10", 53, "dns")
    insert(ns, Flow("10.188.170.5", 43145, kube_dns, kube_dns.ip))
    rules = (DEMO / "node" / "iptables-legacy-save.txt").read_text()
    if drop_service_rule:
        rules = "".join(ln for ln in rules.splitlines(keepends=True) if "kube-dns:dns cluster IP" not in ln)
    files = {"ct.txt": listing(ns), "iptables-save.txt": rules}
    files |= {p.name: p.read_text() for p in sorted((DEMO / "cluster").glob("*.json"))}
    f = kp312(diagnose(tmp_path, files))
    if drop_service_rule:
        assert (f.severity, f.confidence) == (Severity.CRITICAL, Confidence.HIGH)
        assert "the rules given do not translate 172.20.0.10:53 now either" in f.summary
    else:
        assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.MEDIUM)
        assert "The rules given translate it now (" in f.summary
        assert any("-j DNAT --to-destination" in c.text for c in f.evidence)


# -- the captured copies (no root needed) --------------------------------------------------------


def test_a_captured_listing_grades_each_entry_by_what_it_proves(tmp_path: Path) -> None:
    """conntrack-L-udp-stale.txt: a DNS flow kept on a dead backend ([ASSURED]), one on a current
    endpoint, one never translated, and a statsd flow translated to a dead backend, unanswered."""
    ct = (NODE / "conntrack-L-udp-stale.txt").read_text()
    eps = slices({DNS: ["10.244.3.9"], STATSD: ["10.244.4.21"]})
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(DNS, STATSD), "eps.json": eps}))
    assert (f.severity, f.confidence) == (Severity.CRITICAL, Confidence.HIGH)
    assert f.summary.startswith("1 UDP flow(s) to 10.96.0.10:53 (DNS) still go to 10.244.2.7")
    assert "10.96.112.40:8125 still go to 10.244.4.20" in f.summary and "never answered" in f.summary
    assert "Service address 10.96.0.10:53 (kube-system/kube-dns, DNS) were never translated" in f.summary
    assert not any("10.244.3.9" in c.text for c in f.evidence)
    # the dead DNS backend listed again: the never-translated flow is the worst left, and not critical
    eps = slices({DNS: ["10.244.3.9", "10.244.2.7"], STATSD: ["10.244.4.21", "10.244.4.20"]})
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(DNS, STATSD), "eps.json": eps}))
    assert (f.severity, f.confidence) == (Severity.WARNING, Confidence.MEDIUM)
    assert "still go to" not in f.summary


def test_an_entry_older_than_the_udp_timeout_is_stuck(tmp_path: Path) -> None:
    """conntrack-L-udp-timestamp.txt: nf_conntrack_timestamp=1, one never-translated entry kept
    42 s by its client's packets and one 2 s old."""
    ct = (NODE / "conntrack-L-udp-timestamp.txt").read_text()
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(DNS)}))
    assert (f.severity, f.confidence) == (Severity.CRITICAL, Confidence.HIGH)
    assert "it is 42 s old (delta-time)" in f.summary
    assert "1 UDP flow(s)" in f.summary.split(". ")[0] and "30+ s later" in f.summary
    # the node's own UDP timeout when given: 60 s and the entry has not outlived it
    sysctl = "net.netfilter.nf_conntrack_udp_timeout = 60\n"
    f = kp312(diagnose(tmp_path, {"ct.txt": ct, "svc.json": services(DNS), "sysctl.txt": sysctl}))
    assert f.severity == Severity.WARNING and "2 UDP flow(s)" in f.summary


def test_the_same_entry_in_a_session_45_s_apart_is_stuck(tmp_path: Path) -> None:
    """A user's session: `date`, `conntrack -L -p udp`, and again 45 s later, the never-translated
    entry still there with the same 29 s left (its client's packets keep setting it again). Only
    the dates tell that it outlived its timeout; 10 s apart they do not."""
    ct = (NODE / "conntrack-L-udp-stale.txt").read_text()
    objs = {"svc.json": services(DNS, STATSD), "eps.json": slices({DNS: ["10.244.3.9", "10.244.2.7"]})}
    for later, severity in (("10:00:45", Severity.CRITICAL), ("10:00:10", Severity.WARNING)):
        session = (
            f"$ date\nSat Nov 28 10:00:00 UTC 2026\n$ conntrack -L -p udp\n{ct}"
            f"$ date\nSat Nov 28 {later} UTC 2026\n$ conntrack -L -p udp\n{ct}"
        )
        f = kp312(diagnose(tmp_path, {"session.txt": session, **objs}))
        assert f.severity == severity, f.summary
        if severity == Severity.CRITICAL:
            assert "in two listings 45 s apart" in f.summary and "10.96.0.10:53" in f.summary


# -- without the Services: a suspected stuck entry ------------------------------------------------


def test_a_never_translated_unanswered_flow_without_the_services_is_suspected(ns: Netns, tmp_path: Path) -> None:
    """Only the listing: the flow fits a stuck entry if its destination is a Service's, which
    only the Services tell (a dead server elsewhere looks the same)."""
    insert(ns, Flow("10.244.1.8", 43145, STATSD, STATSD.ip))
    f = kp312(diagnose(tmp_path, {"ct.txt": listing(ns)}))
    assert f.suspected and (f.severity, f.confidence) == (Severity.INFO, Confidence.LOW)
    assert any(STATSD.ip in d and "kubectl get svc" in d for d in f.decided_by)
    # with the Services given and the address none of theirs: nothing to suspect
    other = Svc("default", "web", "10.96.7.7", 80, "http")
    none_of(diagnose(tmp_path, {"ct.txt": listing(ns), "svc.json": services(other)}), "KP312")


def test_addresses_masked_before_posting_are_still_one_entry(tmp_path: Path) -> None:
    """`src=<SRC IP A>`: a label in angle brackets, spaces and all, is read as an address; the
    same label on both sides says the flow was not translated."""
    line = (
        "udp 17 29 src=<SRC IP A> dst=<SVC EXT IP> sport=51287 dport=6343 packets=111046 bytes=144979158 "
        "[UNREPLIED] src=<SVC EXT IP> dst=<SRC IP A> sport=6343 dport=51287 packets=0 bytes=0 mark=0 use=1\n"
    )
    (e,) = parse_conntrack_entries(line)
    assert (e.dst, e.reply_src, e.dport) == ("<SVC_EXT_IP>", "<SVC_EXT_IP>", 6343) and not e.dnat
    f = kp312(diagnose(tmp_path, {"ct.txt": line}))
    assert f.suspected and "never translated and never answered" in f.summary

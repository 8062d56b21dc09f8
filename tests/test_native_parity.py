"""The native core walks packets exactly as the Python evaluator does (issue 42's "parity first").

Two sources of rules: every iptables dump the tests know (upstream fixtures, real dumps, the
corpus's reports: each file the loader reads rules from), walked with packets aimed at what their
rules name; and rule sets generated from every option and target both evaluators read (valid,
negated and unreadable values alike), with random packets. For each packet both walks must give
the same outcomes (verdicts, backends, probabilities, reasons, every recorded step, the packet as
the rules left it) and the same undecidable rules; a verification's entries must be the same as
those built from the Python walk.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpdoctor.bundle.loader import load
from kpdoctor.dataplane.backend import Packet
from kpdoctor.dataplane.iptables.backend import FamilyRules, family_rules, native_entries, outcome_entries
from kpdoctor.dataplane.iptables.evaluate import Dep, Evaluator
from kpdoctor.dataplane.iptables.native import CORE_SETTING, NativeEvaluator
from kpdoctor.dataplane.walk import Outcome, Step
from kpdoctor.facts import Facts
from kpdoctor.parse.iptables import Ruleset, parse_save

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS.parent / "bench"))
import gen_cluster  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

LOCAL = [ipaddress.ip_address("192.168.0.10"), ipaddress.ip_address("fd00::10")]
HOOKS = ("prerouting", "output")


def _step(s: Step | None) -> object:
    return None if s is None else (s.table, s.chain, s.line, s.text, round(s.probability, 12))


def _outcome(o: Outcome) -> tuple[object, ...]:
    st_ = o.state
    return (
        round(o.probability, 12),
        o.verdict,
        o.reason,
        o.endpoint,
        o.by_mark,
        o.open_table,
        st_.dnat,
        st_.dst,
        st_.dport,
        st_.mark,
        st_.masquerade,
        st_.notrack,
        list(st_.affinity),
        [_step(s) for s in st_.steps],
        _step(st_.dnat_step),
        _step(st_.drop_mark_step),
    )


def both(rulesets: list[Ruleset], family: int, monkeypatch: pytest.MonkeyPatch) -> tuple[FamilyRules, FamilyRules]:
    monkeypatch.setenv(CORE_SETTING, "python")
    python = family_rules(rulesets, family, LOCAL, record=False)
    monkeypatch.setenv(CORE_SETTING, "native")
    native = family_rules(rulesets, family, LOCAL, record=False)
    return python, native


def assert_same(python: FamilyRules, native: FamilyRules, packets: list[Packet]) -> int:
    """Walk every packet both ways, at both hooks, with and without nat POSTROUTING; the number
    of walks compared."""
    walks = 0
    for (rs, py_ev), (_, nat_ev) in zip(python.primary, native.primary, strict=True):
        assert isinstance(py_ev, Evaluator)
        if not isinstance(nat_ev, NativeEvaluator):  # only text that is not UTF-8 stays the Python walk's
            assert any(not r.text.isascii() and _surrogates(r.text) for t in rs.tables.values() for r in t.rules)
            continue
        for pkt in packets:
            for hook in HOOKS:
                for post in (False, True):
                    want = py_ev.run(pkt, hook, postrouting=post)
                    want_undecided = list(py_ev.undecided)
                    got = nat_ev.run(pkt, hook, postrouting=post)
                    where = f"{rs.artifact}: {pkt} at {hook} (postrouting {post})"
                    assert [_outcome(o) for o in got] == [_outcome(o) for o in want], where
                    assert nat_ev.undecided == want_undecided, where
                    walks += 1
                # with what each walk read: a fresh Python evaluator (its memo of other packets'
                # walks would add their reads). The core records every part the Python walk
                # records (a result it carries over, the Python walk would carry over too), and
                # may record more: each branch's own index key where the Python memo reuses
                # another branch's, and what a walk cut short at an undecidable rule read
                fresh = Evaluator(py_ev.tables, (), None, py_ev.layers[1:], record=False)
                fresh.local = py_ev.local
                fresh.deps = want_reads = set()
                want = fresh.run(pkt, hook, postrouting=False)
                got_reads: set[Dep] = set()
                entries, undecided = nat_ev.entries(pkt, hook, got_reads)
                assert native_entries(nat_ev, entries, "t") == outcome_entries(rs, want, "t"), f"{rs.artifact}: {pkt}"
                assert undecided == fresh.undecided
                assert want_reads <= got_reads, f"{rs.artifact}: {pkt}: {want_reads - got_reads}"
    return walks


def _surrogates(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


def packets_for(rulesets: list[Ruleset], family: int, limit: int = 120) -> list[Packet]:
    """Packets aimed at what the rules name: each exact destination with the ports and
    protocols rules pair with it, the node's address with the ports of rules naming none, from a
    Pod, the node and an outside client; a few with an interface or a mark."""
    aims: dict[tuple[int, str, int], None] = {}
    local = next(a for a in LOCAL if a.version == family)
    for rs in rulesets:
        if rs.family != family:
            continue
        for table in rs.tables.values():
            for r in table.rules:
                cr = _python_compiled(r)
                port = cr.exact_dport
                proto = cr.proto if cr.proto in ("tcp", "udp", "sctp") else "tcp"
                if cr.exact_dst is not None and cr.dst is not None and cr.dst[0] == family:
                    aims[(cr.exact_dst, proto, port or 80)] = None
                elif port is not None:
                    aims[(int(local), proto, port)] = None
    pod, ext = ("10.244.1.7", "203.0.113.5") if family == 4 else ("fd00:244::7", "2001:db8::5")
    out = []
    for i, (dst, proto, port) in enumerate(list(aims)[:limit]):
        addr = ipaddress.ip_address(dst) if family == 4 else ipaddress.IPv6Address(dst)
        src = ipaddress.ip_address((pod, ext, str(local))[i % 3])
        out.append(Packet(src, addr, proto, port))
        if i % 7 == 0:
            out.append(Packet(src, addr, proto, port, iif="eth0", mark=0x4000))
    out.append(Packet(ipaddress.ip_address(ext), local, "tcp", 30080))
    return out


def _python_compiled(rule: object) -> object:
    from kpdoctor.dataplane.iptables.compile import compile_general

    return compile_general(rule)  # type: ignore[arg-type]


def rule_files() -> Iterator[Path]:
    """Every file under tests/data and the corpus that holds iptables rules."""
    for root in (TESTS / "data", TESTS / "realworld"):
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.suffix in (".py", ".json", ".yaml", ".yml", ".gz", ".tgz", ".tar"):
                continue
            if path.stat().st_size > 4_000_000:
                continue
            head = path.read_bytes()
            if b"-A KUBE-" in head or b"\n*nat" in head or b"\n*filter" in head:
                yield path


def test_every_dump_the_tests_know_walks_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    files = walks = 0
    for path in rule_files():
        rulesets = Facts(load([path])).rulesets
        if not rulesets:
            continue
        files += 1
        for family in sorted({rs.family for rs in rulesets}):
            python, native = both(rulesets, family, monkeypatch)
            if python.missing:
                continue
            walks += assert_same(python, native, packets_for(rulesets, family))
    assert files >= 50 and walks >= 1_200, (files, walks)


def test_a_generated_cluster_verifies_the_same_end_to_end(tmp_path: Path) -> None:
    """bench/gen_cluster.py's node (kube-proxy's layout and chain names, every fifth Service a
    NodePort, Services of up to 5 endpoints): ``kpdoctor verify``'s whole JSON report is the
    same byte for byte whichever walks the rules, and so are a node's stale rules (a Service
    deleted from the cluster but not from the rules)."""
    save, cluster = gen_cluster.write(tmp_path, 300, 4)
    objects = json.loads(cluster.read_text())
    gone = next(o for o in objects["items"] if o["kind"] == "Service" and o["metadata"]["name"] != "kubernetes")
    objects["items"] = [
        o
        for o in objects["items"]
        if not (
            o["kind"] in ("Service", "EndpointSlice")
            and o["metadata"]["namespace"] == gone["metadata"]["namespace"]
            and o["metadata"].get("labels", {}).get("kubernetes.io/service-name", o["metadata"]["name"])
            == gone["metadata"]["name"]
        )
    ]
    stale = tmp_path / "stale-cluster.json"
    stale.write_text(json.dumps(objects))
    for cl, code in ((cluster, 0), (stale, 1)):
        python, native = (verify_json(save, cl, core, code) for core in ("python", "native"))
        assert python == native
        assert bool(native["verification"]["stale_rules"]) == (code == 1)


def verify_json(save: Path, cluster: Path, core: str, code: int = 0) -> Any:
    """``kpdoctor verify -f json`` of a node with one walk (``core``), which exits ``code``."""
    env = dict(os.environ, **{CORE_SETTING: core, "KPDOCTOR_WORKERS": "1"})
    done = subprocess.run(
        [sys.executable, "-m", "kpdoctor", "verify", "-f", "json", str(save), str(cluster)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout)


def test_a_node_with_more_short_chains_than_the_core_keeps_compiled_verifies_the_same(tmp_path: Path) -> None:
    """The core keeps a short chain's compiled form only among the last it compiled
    (``SHORT_CHAINS_KEPT``): a node with more Service and endpoint chains than that compiles
    some again, and its report is the Python walk's, byte for byte."""
    from kpdoctor import _core

    services = _core.SHORT_CHAINS_KEPT // 4
    save, cluster = gen_cluster.write(tmp_path, services, 4)
    short = {line.split()[0] for line in save.read_text().splitlines() if line.startswith((":KUBE-SVC-", ":KUBE-SEP-"))}
    assert len(short) > _core.SHORT_CHAINS_KEPT
    python, native = (verify_json(save, cluster, core) for core in ("python", "native"))
    assert python == native
    assert native["verification"]["services_checked"] == services


# -- generated rule sets: every option and target, valid and not --------------------------------

ADDRS = ["10.96.0.10", "10.244.1.7", "192.168.0.10", "127.0.0.1", "203.0.113.5", "224.0.0.1", "fd00::10"]
NETS = ["10.0.0.0/8", "10.96.0.10/32", "0.0.0.0/0", "192.168.0.0/16", "10.0.0.0/33", "fd00::/64", "1.2.3"]
USER_CHAINS = ["KUBE-SERVICES", "KUBE-SVC-A", "KUBE-SEP-B", "KUBE-MARK-DROP", "KUBE-MARK-MASQ", "CUSTOM"]

MATCHES = st.sampled_from(
    [
        "-s {net}",
        "! -s {net}",
        "-d {addr}/32",
        "! -d {net}",
        "-d {net}",
        "-p tcp",
        "-p udp",
        "! -p tcp",
        "-p all",
        "-p 6",
        "-p tcp -m tcp --dport {port}",
        "-p udp -m udp --dport {port}",
        "-p tcp -m tcp ! --dport {port}",
        "-p tcp -m multiport --dports 80,443,30000:30100",
        "-p tcp -m tcp --dport http",
        "-p tcp -m tcp --sport 40000:40100",
        "-p tcp -m tcp --sport x",
        "-m statistic --mode random --probability {prob}",
        "! -m statistic --mode random --probability {prob}",
        "-m statistic --mode nth --every 3 --packet 0",
        "-m statistic --mode nth --every 0",
        "-m mark --mark 0x4000/0x4000",
        "-m mark ! --mark 0x8000/0x8000",
        "-m mark --mark zz",
        "-m addrtype --dst-type LOCAL",
        "-m addrtype ! --dst-type LOCAL",
        "-m addrtype --src-type LOCAL",
        "-m addrtype --dst-type UNICAST",
        "-m addrtype --dst-type BROADCAST",
        "-m conntrack --ctstate NEW",
        "-m conntrack --ctstate DNAT",
        "-m conntrack --ctstate INVALID",
        "-m state --state RELATED,ESTABLISHED",
        "-i eth0",
        "! -i lo",
        "-o cali+",
        "-m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-B --mask 255.255.255.255 --rsource",
        "-m recent --set --name KUBE-SEP-B --mask 255.255.255.255 --rsource",
        "-m set --match-set KUBE-CLUSTER-IP dst,dst",
        "-m physdev --physdev-is-bridged",
        "-m foo --bar baz",
        '-m comment --comment "default/web:http cluster IP"',
        "-m comment --comment plain",
        '-m comment --comment "caf\u00e9 \u00a0x"',
        "-m comment --comment \udcff\udcfe",
        "-m comment --comment tab\there",
        "-m comment --comment \"it's\"",
        "-m icmp --icmp-type 8",
    ]
)
TARGETS = st.sampled_from(
    [
        "-j ACCEPT",
        "-j DROP",
        "-j REJECT --reject-with icmp-port-unreachable",
        "-j RETURN",
        "-j KUBE-SVC-A",
        "-j KUBE-SEP-B",
        "-g KUBE-SEP-B",
        "-j KUBE-MARK-DROP",
        "-j KUBE-MARK-MASQ",
        "-j CUSTOM",
        "-j NOWHERE",
        "-j DNAT --to-destination {addr}:8080",
        "-j DNAT --to-destination {addr}",
        "-j DNAT --to-destination [fd00::10]:53",
        "-j DNAT --to-destination 10.0.0.0/8",
        "-j DNAT --to-destination 10.1.1.1:0x50",
        "-j DNAT",
        "-j MARK --set-xmark 0x4000/0x4000",
        "-j MARK --set-xmark 0x8000/0x8000",
        "-j MARK --or-mark 0x1",
        "-j MARK --and-mark 0x0",
        "-j MARK --set-mark 0x2/0xff",
        "-j MARK --set-mark 0x99999999999",
        "-j MARK",
        "-j MASQUERADE",
        "-j MASQUERADE --random-fully",
        "-j SNAT --to-source 1.2.3.4",
        "-j REDIRECT --to-ports 15001",
        "-j REDIRECT --to-ports none",
        "-j CT --notrack",
        "-j NOTRACK",
        "-j LOG --log-prefix x",
        "-j CONNMARK --save-mark",
        "",
    ]
)


@st.composite
def rule_sets(draw: st.DrawFn) -> str:
    """An iptables-save dump: raw, mangle, nat and filter, built-in chains with random
    policies, kube-proxy-like user chains, rules drawn from every match and target above."""
    fill = {
        "addr": st.sampled_from(ADDRS[:-1]),
        "net": st.sampled_from(NETS),
        "port": st.sampled_from(["80", "53", "30080", "8080:8090", "65536", "0"]),
        "prob": st.sampled_from(["0.50000000000", "0.33333333349", "0.25", "1.0", "0", "2", "nan"]),
    }
    lines = []
    for table, builtins in (
        ("raw", ["PREROUTING", "OUTPUT"]),
        ("mangle", ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]),
        ("nat", ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"]),
        ("filter", ["INPUT", "FORWARD", "OUTPUT"]),
    ):
        if table != "nat" and draw(st.booleans()):
            continue
        lines.append(f"*{table}")
        chains = builtins + (USER_CHAINS if table in ("nat", "filter") else [])
        for c in chains:
            policy = draw(st.sampled_from(["ACCEPT", "ACCEPT", "DROP"])) if c in builtins else "-"
            lines.append(f":{c} {policy} [0:0]")
        for c in chains:
            for _ in range(draw(st.integers(0, 4 if c in builtins else 6))):
                parts = [draw(MATCHES) for _ in range(draw(st.integers(0, 3)))] + [draw(TARGETS)]
                text = " ".join(p for p in parts if p)
                for key, strat in fill.items():
                    while "{" + key + "}" in text:
                        text = text.replace("{" + key + "}", draw(strat), 1)
                lines.append(f"-A {c} {text}".rstrip())
        lines.append("COMMIT")
    return "\n".join(lines) + "\n"


PACKETS = st.builds(
    Packet,
    src=st.sampled_from([ipaddress.ip_address(a) for a in ("10.244.1.7", "192.168.0.10", "203.0.113.5", "127.0.0.1")]),
    dst=st.sampled_from([ipaddress.ip_address(a) for a in ADDRS[:-1]]),
    proto=st.sampled_from(["tcp", "udp"]),
    dport=st.sampled_from([80, 53, 30080, 8085, 443]),
    sport=st.sampled_from([40000, 40050, 50000]),
    iif=st.sampled_from([None, "eth0", "cali1"]),
    oif=st.sampled_from([None, "eth0"]),
    mark=st.sampled_from([0, 0x4000, 0x8000]),
)


@settings(
    max_examples=int(os.environ.get("KPDOCTOR_PARITY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(dump=rule_sets(), packets=st.lists(PACKETS, min_size=1, max_size=6))
def test_generated_rule_sets_walk_the_same(dump: str, packets: list[Packet]) -> None:
    rs = parse_save(dump, "gen", "legacy", 4)
    with pytest.MonkeyPatch.context() as mp:
        python, native = both([rs], 4, mp)
        assert_same(python, native, packets)


def test_a_core_that_does_not_load_is_named_with_its_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kpdoctor installed without its native core (a copy of the sources, a broken build): the
    node is still verified, by the Python evaluator, and the command warns why and how to fix
    it; ``KPDOCTOR_CORE=python`` (a choice, not a fault) says nothing."""
    from click.testing import CliRunner

    from kpdoctor.cli import app
    from kpdoctor.dataplane.iptables import native

    save, cluster = gen_cluster.write(tmp_path, 20, 2)
    monkeypatch.setitem(sys.modules, "kpdoctor._core", None)  # import kpdoctor._core raises ImportError
    native.core.cache_clear()
    monkeypatch.setattr("kpdoctor.cli._exit", sys.exit)
    try:
        with pytest.raises(native.CoreMissing, match=r"pip install \.") as exc:
            native.core()
        assert "KPDOCTOR_CORE=python" in str(exc.value)
        for core, said in (("native", True), ("python", False)):
            monkeypatch.setenv(CORE_SETTING, core)
            res = CliRunner().invoke(app, ["verify", "-f", "json", str(save), str(cluster)])
            assert res.exit_code == 0, res.output
            report = json.loads(res.stdout)
            assert report["verification"]["ok"] > 0 and not report.get("internal_errors")
            assert ("pip install ." in res.stderr and "Python evaluator instead" in res.stderr) == said, res.stderr
    finally:
        native.core.cache_clear()


def walked_alike(dump: str, monkeypatch: pytest.MonkeyPatch) -> tuple[FamilyRules, FamilyRules, Packet]:
    """One dump's rules for both walks, and a Pod's packet to a ClusterIP they walk alike."""
    python, native = both([parse_save(dump, "dump", "legacy", 4)], 4, monkeypatch)
    pkt = Packet(ipaddress.ip_address("10.244.1.7"), ipaddress.ip_address("10.96.0.10"))
    assert_same(python, native, [pkt])
    return python, native, pkt


def test_a_chain_that_doubles_its_paths_at_every_level_is_uncertain_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two probabilistic jumps of a chain to itself double the paths at each of 64 levels (found
    by bench/fuzz_native.py: both walks hung, growing without bound). Every split counts against
    one bound for the whole walk: the outcome is uncertain, at once, the same in both walks."""
    dump = (
        "*nat\n:PREROUTING ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:KUBE-SVC-A - [0:0]\n"
        "-A OUTPUT -j KUBE-SVC-A\n"
        "-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SVC-A\n"
        "-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SVC-A\nCOMMIT\n"
    )
    _python, native, pkt = walked_alike(dump, monkeypatch)
    (o,) = native.primary[0][1].run(pkt, "output", False)
    assert o.verdict == "UNCERTAIN" and o.reason.startswith("more than 4,099 paths through nat KUBE-SVC-A"), o.reason


def test_the_filter_walk_tells_a_multicast_destination_from_a_unicast_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """``-m addrtype --dst-type UNICAST`` in filter: of one Service's two backends, the unicast
    one is dropped and the multicast one is not. The Python walk's memo of the filter walks once
    took no account of the address type, and gave both backends the first one's fate (found by
    bench/fuzz_native.py: the core, which walks each branch, disagreed)."""
    dump = (
        "*nat\n:OUTPUT ACCEPT [0:0]\n"
        "-A OUTPUT -m statistic --mode random --probability 0.50000000000 -j DNAT --to-destination 224.0.0.1:8080\n"
        "-A OUTPUT -j DNAT --to-destination 10.96.0.11:8080\nCOMMIT\n"
        "*filter\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -m addrtype --dst-type UNICAST -j DROP\nCOMMIT\n"
    )
    python, _native, pkt = walked_alike(dump, monkeypatch)
    fates = {o.endpoint: o.verdict for o in python.primary[0][1].run(pkt, "output", False)}
    assert fates == {"224.0.0.1:8080": "ACCEPT", "10.96.0.11:8080": "DROP"}


def test_a_branch_the_rules_did_not_masquerade_is_not_masqueraded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Half of the traffic masqueraded in nat PREROUTING, half not: the Python walk's memo of the
    later tables once merged the first branch's masquerade into the second (found by
    bench/fuzz_native.py after 48,000 rule sets)."""
    dump = (
        "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-MARK-MASQ - [0:0]\n-A PREROUTING -j KUBE-MARK-MASQ\n"
        "-A KUBE-MARK-MASQ -m statistic --mode random --probability 0.50000000000 -j MASQUERADE\nCOMMIT\n"
    )
    python, _native, pkt = walked_alike(dump, monkeypatch)
    assert sorted(o.state.masquerade for o in python.primary[0][1].run(pkt, "prerouting", False)) == [False, True]


def test_a_panic_in_the_core_is_an_error_the_verification_contains() -> None:
    """PyO3 raises a Rust panic as PanicException, a BaseException: the verification stage,
    which contains every Exception (the run's other stages and the report go on), would let it
    through. The core's calls turn it into an error; Ctrl-C stays Ctrl-C."""
    from kpdoctor.dataplane.iptables import native

    class PanicException(BaseException):  # the name PyO3 gives the type (pyo3_runtime.PanicException)
        pass

    with pytest.raises(RuntimeError, match="native core failed: index out of bounds"), native._contained():
        raise PanicException("index out of bounds")
    with pytest.raises(KeyboardInterrupt), native._contained():
        raise KeyboardInterrupt


def test_each_backend_s_own_index_bucket_is_read_where_the_walk_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Service's two backends pass an indexed filter chain (KUBE-SERVICES, by destination):
    each branch reads its own backend's bucket, and what the walk reads says so for both, in
    both walks (the Python walk once took the second branch's filter walk from its memo, with
    the first branch's bucket: a rule added later for the second backend's address would not
    have made the agent evaluate the Service again)."""
    cluster_ips = "".join(f"-A KUBE-SERVICES -d 10.96.1.{i}/32 -p tcp -j REJECT\n" for i in range(30))
    dump = (
        "*nat\n:PREROUTING ACCEPT [0:0]\n"
        "-A PREROUTING -m statistic --mode random --probability 0.50000000000 -j DNAT --to-destination 10.244.1.5:80\n"
        "-A PREROUTING -j DNAT --to-destination 10.244.2.6:80\nCOMMIT\n"
        "*filter\n:FORWARD ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n-A FORWARD -j KUBE-SERVICES\n" + cluster_ips + "COMMIT\n"
    )
    python, native, pkt = walked_alike(dump, monkeypatch)
    ev = python.primary[0][1]
    assert isinstance(ev, Evaluator)
    ev.deps = reads = set()
    ev.run(pkt, "prerouting", postrouting=False)
    buckets = {d[3] for d in reads if d[2] == "KUBE-SERVICES" and isinstance(d[3], tuple)}
    assert buckets == {("dst", int(ipaddress.ip_address(a))) for a in ("10.244.1.5", "10.244.2.6")}
    core_reads: set[Dep] = set()
    native.primary[0][1].entries(pkt, "prerouting", core_reads)
    assert reads <= core_reads

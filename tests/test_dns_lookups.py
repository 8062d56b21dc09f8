"""How long a name lookup took, read as the resolver's wait for a lost query (parse/lookups.py)
and as KP300's lead (the conntrack insert race, decided by `conntrack -S`). The sessions are the
real tools' output made here (tests/data/dns/README.md) and forms their sources print."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from conftest import DATA, none_of, one

from kpdoctor.model import Report, Severity
from kpdoctor.parse.lookups import Lookup, is_timed_lookup, lookup_of, waited_lookups

Diag = Callable[..., Report]
DNS = DATA / "dns"
NAME = "kubernetes.default.svc.cluster.local"
CURL = (
    f'time curl -s -o /dev/null -m 20 -w "%{{time_namelookup}} %{{time_connect}} %{{time_total}}\\n" http://{NAME}:1/'
)
SESSIONS = {
    "dig-retry.txt": f"time dig @127.0.0.1 {NAME}",
    "nslookup-retry.txt": f"time nslookup {NAME}",
    "getent-retry.txt": f"time getent hosts {NAME}",
    "curl-retry.txt": CURL,
    "bb-retry.txt": f"time busybox nslookup {NAME} 127.0.0.1",
}


def _session(name: str, prompt: str = "root@node-1:~# ") -> str:
    return f"{prompt}{SESSIONS[name]}\n" + (DNS / name).read_text()


@pytest.mark.parametrize(
    "cmdline,tool,name,in_pod",
    [
        ("time nslookup kubernetes.default", "nslookup", "kubernetes.default", False),
        ("dig +short @10.96.0.10 kube-dns.kube-system.svc.cluster.local", "dig", "kube-dns.kube-system.svc.cluster.local",
         False),
        ("kubectl exec -it busybox -- nslookup kubernetes.default", "nslookup", "kubernetes.default", True),
        ("kubectl exec dnsutils -- busybox nslookup web", "busybox nslookup", "web", True),
        ("sudo time getent ahosts web.default.svc", "getent", "web.default.svc", False),
        ("curl -sv -m 5 http://web.default.svc:8080/health", "curl", "web.default.svc", False),
        ("wget -qO- https://api.example.com/v1", "wget", "api.example.com", False),
    ],
)  # fmt: skip
def test_a_command_that_resolves_a_name(cmdline: str, tool: str, name: str, in_pod: bool) -> None:
    got = lookup_of(cmdline)
    assert got is not None and (got.tool, got.name, got.in_pod) == (tool, name, in_pod)


@pytest.mark.parametrize(
    "cmdline", ["curl http://10.96.0.1:443/", "nslookup 10.96.0.1", "ping -c 3 10.244.1.5", "kubectl get pods"]
)
def test_an_address_or_another_command_is_no_lookup(cmdline: str) -> None:
    assert lookup_of(cmdline) is None


@pytest.mark.parametrize(
    "name,how,seconds,waited",
    [
        ("dig-retry.txt", "retry printed", None, 5.0),
        ("nslookup-retry.txt", "retry printed", None, 5.0),
        ("getent-retry.txt", "timed", 5.009, 5.0),
        ("curl-retry.txt", "curl -w", 5.006029, 5.0),
        ("bb-retry.txt", "timed", 2.507, 2.5),
    ],
)
def test_the_real_tools_lookups_that_lost_a_query(name: str, how: str, seconds: float | None, waited: float) -> None:
    (w,) = waited_lookups(_session(name))
    assert (w.how, w.seconds, w.waited, w.losses) == (how, seconds, waited, 1)
    assert w.lookup.name == NAME
    assert is_timed_lookup((DNS / name).read_text(), SESSIONS[name])


def test_each_run_of_a_loop_is_read_on_its_own() -> None:
    """`for i in $(seq 3); do time getent hosts web; done`: three timings, one of them waited."""
    text = (
        "$ for i in $(seq 3); do time getent hosts web.default.svc.cluster.local; done\n"
        "10.96.12.7      web.default.svc.cluster.local\n\nreal\t0m0.004s\nuser\t0m0.001s\nsys\t0m0.000s\n"
        "10.96.12.7      web.default.svc.cluster.local\n\nreal\t0m5.006s\nuser\t0m0.002s\nsys\t0m0.000s\n"
        "10.96.12.7      web.default.svc.cluster.local\n\nreal\t0m0.003s\nuser\t0m0.001s\nsys\t0m0.000s\n"
    )
    (w,) = waited_lookups(text)
    assert (w.seconds, w.line, w.text) == (5.006, 8, "real 0m5.006s")


def test_a_lookup_that_failed_in_the_end_did_not_wait_for_an_answer() -> None:
    """Every try lost (dig 9.18.6+: three timed-out tries, then "no servers could be reached"):
    a hard failure the messages catalogue reads, not a lost query answered on the next try."""
    text = (
        f"$ time dig @10.96.0.10 {NAME}\n"
        ";; communications error to 10.96.0.10#53: timed out\n"
        ";; communications error to 10.96.0.10#53: timed out\n"
        ";; communications error to 10.96.0.10#53: timed out\n\n"
        f"; <<>> DiG 9.18.49-1~deb12u3-Debian <<>> @10.96.0.10 {NAME}\n"
        "; (1 server found)\n;; global options: +cmd\n;; no servers could be reached\n\n"
        "real\t0m15.019s\nuser\t0m0.010s\nsys\t0m0.006s\n"
    )
    assert waited_lookups(text) == []


def test_kubectl_exec_adds_its_round_trips_to_the_wait() -> None:
    text = (
        "$ time kubectl exec -it busybox -- nslookup kubernetes.default\nServer:    10.96.0.10\n"
        "Address 1: 10.96.0.10 kube-dns.kube-system.svc.cluster.local\n\nName:      kubernetes.default\n"
        "Address 1: 10.96.0.1 kubernetes.default.svc.cluster.local\n\nreal\t0m6.112s\nuser\t0m0.095s\nsys\t0m0.028s\n"
    )
    (w,) = waited_lookups(text)
    assert w.lookup == Lookup("nslookup", "kubernetes.default", True) and w.waited == 5.0
    assert waited_lookups(text.replace("kubectl exec -it busybox -- ", "")) == []  # 6.1 s is no wait of 5 s


def test_a_waited_lookup_is_the_insert_races_lead_decided_by_conntrack(diagnose: Diag) -> None:
    report = diagnose({"session.txt": _session("getent-retry.txt")})
    f = one(report, "KP300")
    assert f.cause == "conntrack-insert-race" and f.suspected and f.severity == Severity.INFO
    assert f"a getent of {NAME} took 5.01 s" in f.summary and "A and AAAA" in f.summary
    assert any(d.startswith("conntrack -S") for d in f.decided_by)
    assert f.evidence[0].text == "real 0m5.009s"


def test_an_old_kernel_makes_the_lead_a_warning(diagnose: Diag) -> None:
    report = diagnose({"session.txt": _session("getent-retry.txt") + "$ uname -r\n4.15.0-112-generic\n"})
    f = one(report, "KP300")
    assert f.severity == Severity.WARNING and f.suspected and "kernel 5.6" in f.fixed_in


def test_digs_lost_try_is_not_the_pair_colliding(diagnose: Diag) -> None:
    """dig sends one query: its lost try is a lost packet, not the A/AAAA pair's race."""
    f = one(diagnose({"session.txt": _session("dig-retry.txt")}), "KP300")
    assert "not the A/AAAA pair colliding" in f.summary and "time getent hosts" in f.summary


def test_conntrack_counters_without_insert_failures_rule_the_race_out(diagnose: Diag) -> None:
    stats = "".join(
        f"cpu={c}   \tfound=0 invalid=3 insert=0 insert_failed=0 drop=0 early_drop=0 error=0 search_restart=2\n"
        for c in range(2)
    )
    report = diagnose({"session.txt": _session("getent-retry.txt") + "$ conntrack -S\n" + stats})
    none_of(report, "KP300")


def test_a_lookup_answered_at_once_is_no_lead(diagnose: Diag) -> None:
    text = _session("getent-retry.txt").replace("real\t0m5.009s", "real\t0m0.009s")
    none_of(diagnose({"session.txt": text}), "KP300")

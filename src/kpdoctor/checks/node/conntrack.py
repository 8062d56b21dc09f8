"""KP300 conntrack insert races and KP301 a full conntrack table: the node drops new flows."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import start, suspect
from kpdoctor.checks.node.common import SINCE_BOOT, read_counters, setting_cites, sysctl_advice
from kpdoctor.facts import Facts
from kpdoctor.facts.node import CONNTRACK
from kpdoctor.knowledge import check
from kpdoctor.model import Cite, Confidence, Finding, Severity

# Kernel releases that fixed the three conntrack insertion races behind the "5 s DNS delay".
RACE_FIXES = (
    ((4, 19), "4.19", "identical entries from one socket (ed07d9a021df)"),
    ((5, 0), "5.0", "the second packet getting another source port (4e35c1cb9460)"),
    ((5, 6), "5.6", "parallel packets DNATed to different backends (6a757c07e51f)"),
)
NEAR_FULL = 0.75  # nf_conntrack_count / nf_conntrack_max: warning
FULL = 0.90  # critical: the next burst of connections is dropped
TABLE_FULL = lazy_re.compile(r"nf_conntrack: (?:nf_conntrack: )?table full(?:,| in netns \d+,) dropping packet")
KUBE_PROXY_MAX_PER_CORE = 32768
KUBE_PROXY_MIN = 131072


@check(
    "KP300",
    cause="conntrack-insert-race",
    title="Concurrent NAT makes conntrack inserts collide (insert_failed grows)",
    severity=Severity.WARNING,
    needs=[Kind.CONNTRACK_STATS, Kind.NF_CONNTRACK_STAT, Kind.LOOKUP_TIMING],
    counters=[CONNTRACK + "insert_failed", CONNTRACK + "drop"],
)
def insert_race(facts: Facts) -> Iterator[Finding]:
    """Packets of new connections are dropped when two of them race to create the same conntrack entry.

    Symptom: intermittent connection timeouts through Services or SNAT, most visibly DNS lookups
        that take 5 s (glibc and musl send the A and AAAA queries in parallel from one socket; one
        is dropped and sent again when the resolver's wait ends: 5 s with glibc, 2.5 s with musl).
    Cause: with NAT (DNAT to a Service backend, SNAT/MASQUERADE to outside), two packets of new
        flows are translated in parallel on different CPUs and end with the same tuple; only the
        first insert wins, the other packet is dropped (`insert_failed`, and `drop` when the
        kernel cannot resolve the clash). Kernels fixed three variants: 4.19 (identical entries
        from one socket), 5.0 (a second packet getting a different source port) and 5.6 (packets
        DNATed to different backends). SNAT port clashes remain without `--random-fully`.
    How it is detected: `conntrack -S` or /proc/net/stat/nf_conntrack summed over CPUs. Two
        snapshots: `insert_failed` growing between them is a warning (the race happens now).
        One snapshot: a non-zero total since boot, stated with its share of attempted inserts
        when the kernel counts inserts, is info (when it happened is unknown), unless it is 1%
        or more of them, `conntrack -L` shows DNS queries left unanswered ([UNREPLIED] UDP to
        port 53, the A/AAAA race's trace) or the rules DNAT UDP to port 53 (a DNS Service,
        where the race bites): then a warning, with how to confirm it (a second snapshot).
        The kernel version (uname) selects the advice; MASQUERADE rules without
        `--random-fully` in the iptables-save given are cited. Without the counters: name
        lookups that answered only after the resolver sent the query again (`time nslookup`
        5 s, or 2.5 s with musl; dig's `communications error ... timed out` before its answer;
        curl -w's time_namelookup) fit the race and are a suspected cause, at info (a warning
        when the kernel given lacks a fix), decided by `conntrack -S`; counters shown without
        insert failures rule it out.
    Fix: upgrade the kernel to 5.6 or later (5.0 at least); make MASQUERADE use
        `--random-fully` (kube-proxy 1.16+ does when iptables is 1.6.2+); for DNS, run
        NodeLocal DNSCache or give Pods `dnsConfig.options: [{name: single-request-reopen}]`
        (glibc) so A and AAAA do not share a socket.
    References: https://github.com/kubernetes/kubernetes/issues/56903;
        https://www.weave.works/blog/racy-conntrack-and-dns-lookup-timeouts;
        https://github.com/kubernetes/kubernetes/pull/78547
    """
    node = facts.node_state
    reading = read_counters(node, [CONNTRACK + "insert_failed", CONNTRACK + "drop"])
    names = [n for n, _ in reading.growing] + [t.name for t in reading.totals]
    if not any(n.endswith("insert_failed") for n in names):
        if not (facts.has(Kind.CONNTRACK_STATS) or facts.has(Kind.NF_CONNTRACK_STAT)):
            yield from _lookups_waited(facts)  # shown without insert failures, the counters rule it out
        return
    dns = [(a, e) for a, e in node.conntrack_entries if e.proto == "udp" and e.dport == 53 and "UNREPLIED" in e.flags]
    dns_dnat = [] if reading.growing else _udp_dns_dnat(facts)
    severity = reading.severity(Severity.WARNING)
    if (dns or dns_dnat) and severity == Severity.INFO:
        # since-boot totals plus what makes the race likely here: DNS queries left without an
        # answer now, or Service DNAT of UDP DNS (the A/AAAA pair from one socket, DNATed in parallel)
        severity = Severity.WARNING
    f = start(
        facts,
        "KP300",
        [],
        confidence=Confidence.HIGH if reading.growing else Confidence.MEDIUM,
        severity=severity,
        summary="conntrack inserts are colliding: " + reading.describe() + ".",
    )
    f.evidence = reading.cites[:4]
    if dns:
        a, e = dns[0]
        f.summary += (
            f" {len(dns)} DNS quer{'y' if len(dns) == 1 else 'ies'} in the conntrack table never got an answer "
            "([UNREPLIED] UDP to port 53): the pattern of the A/AAAA race."
        )
        f.evidence.append(Cite(a.name, e.line, e.text))
    elif dns_dnat:
        f.summary += (
            f" The node DNATs UDP DNS to {len(dns_dnat)} backend(s) (Service rules to port 53): parallel A/AAAA "
            "queries from one socket are where the race drops packets (5 s lookups)."
        )
        f.evidence.append(dns_dnat[0])
    f.summary += reading.confirm("conntrack -S")
    f.ongoing = True if reading.growing or dns else None
    _kernel_advice(facts, f)
    plain = _masquerade_without_random_fully(facts)
    if plain:
        f.evidence.append(plain[0])
        f.fix.append(
            f"{len(plain)} MASQUERADE rule(s) lack --random-fully: run kube-proxy 1.16+ with iptables 1.6.2+ "
            "(it adds the flag), and the same for the CNI's and ip-masq-agent's rules."
        )
    f.fix.append(
        "For DNS timeouts: deploy NodeLocal DNSCache, or set dnsConfig.options "
        "[{name: single-request-reopen}] (glibc) on the affected Pods."
    )
    yield f


def _kernel_advice(facts: Facts, f: Finding) -> bool:
    """The kernel release's part of the advice; True when the kernel given lacks a race fix."""
    kernel = facts.kernel
    if kernel is None:
        f.fix.append("Check the kernel (uname -r): 5.6 or later fixes the three known insertion races.")
        return False
    f.versions_found["kernel"] = str(kernel.value)
    f.evidence.append(kernel.cite)
    missing = [(v, why) for base, v, why in RACE_FIXES if kernel.value.base[:2] < base]
    if missing:
        f.fix.append(
            f"Upgrade the kernel ({kernel.value}) to 5.6 or later: it lacks the fixes for "
            + "; ".join(f"{why} in {v}" for v, why in missing)
            + "."
        )
        f.fixed_in.append("kernel 5.6")
        return True
    f.summary += f" Kernel {kernel.value} has the three race fixes: the collisions left are SNAT port clashes."
    return False


def _lookups_waited(facts: Facts) -> Iterator[Finding]:
    """Lookups that answered after a resend, the conntrack counters not given: the race fits
    (a query of the A/AAAA pair lost, the answer on the next try); `conntrack -S` decides."""
    waited = facts.waited_lookups
    if not waited:
        return
    w = waited[0][0]
    took = f"took {w.seconds:.2f} s" if w.seconds is not None else f"printed its timed-out try ({w.text})"
    per = "2.5 s (musl, BusyBox)" if w.waited % 5 else "5 s (glibc, Go, BIND's tools)"
    lost = f"{w.losses} lost tr{'y' if w.losses == 1 else 'ies'}"
    f = start(facts, "KP300", [], confidence=Confidence.LOW, severity=Severity.INFO)
    suspect(
        f,
        "name lookups answered only after the resolver sent a query again; the conntrack counters were not given",
        ["conntrack -S (twice, a few seconds apart: insert_failed growing)", "uname -r"],
    )
    f.summary = (
        f"{len(waited)} name lookup(s) answered only after the resolver sent the query again: a {w.lookup.tool} "
        f"of {w.lookup.name} {took}, the resolver's wait of {per} for {lost}. "
    )
    if any(x.lookup.pair for x, _ in waited):
        f.summary += (
            "A lost query and an answer on the next try is the conntrack insert race's signature on a node that "
            "DNATs DNS to the cluster DNS: the resolver sends the A and AAAA queries at once from one socket, and "
            "one of the pair is dropped when their conntrack entries collide."
        )
    else:
        f.summary += (
            f"{w.lookup.tool} sends one query at a time, so this is not the A/AAAA pair colliding: a DNS packet was "
            "lost on this path (the race's other forms, SNAT port clashes, a full conntrack table, or the DNS Pod); "
            "time a lookup through libc (`time getent hosts NAME`) to see the pair's race."
        )
    f.summary += " `conntrack -S` (insert_failed growing) confirms it."
    f.evidence = [c for _, c in waited[:3]]
    f.ongoing = True
    if _kernel_advice(facts, f):
        f.severity = Severity.WARNING  # a kernel without the fixes makes the lead likely
    f.fix.append(
        "For DNS timeouts: deploy NodeLocal DNSCache, or set dnsConfig.options "
        "[{name: single-request-reopen}] (glibc) on the affected Pods."
    )
    yield f


def _udp_dns_dnat(facts: Facts) -> list[Cite]:
    """Rules that DNAT UDP to port 53 (kube-proxy's DNS Service endpoints), one per backend."""
    out: dict[str, Cite] = {}
    for rs in facts.rulesets:
        nat = rs.tables.get("nat")
        for r in nat.rules if nat is not None else []:
            if ":53" not in r.text or r.target != "DNAT" or "udp" not in r.args:  # the text first: no tokenising
                continue
            dest = r.args[r.args.index("--to-destination") + 1] if "--to-destination" in r.args[:-1] else ""
            if dest.endswith(":53"):
                out.setdefault(dest, Cite(rs.artifact, r.line, r.text.strip()))
    return list(out.values())


def _masquerade_without_random_fully(facts: Facts) -> list[Cite]:
    out = []
    for rs in facts.rulesets:
        nat = rs.tables.get("nat")
        for r in nat.rules if nat is not None else []:
            if "-j MASQUERADE" in r.text and "--random-fully" not in r.text:
                out.append(Cite(rs.artifact, r.line, r.text.strip()))
    return out


@check(
    "KP301",
    cause="conntrack-table-full",
    title="The conntrack table is full: the kernel drops new connections",
    severity=Severity.CRITICAL,
    needs=[
        Kind.KERNEL_LOG,
        Kind.SYSCTL,
        Kind.CONNTRACK_STATS,
        Kind.NF_CONNTRACK_STAT,
        Kind.CONNTRACK_ENTRIES,
        Kind.LINE_COUNT,
    ],
    counters=[CONNTRACK + "early_drop"],
)
def table_full(facts: Facts) -> Iterator[Finding]:
    """New connections are dropped because nf_conntrack_max entries are in use.

    Symptom: new connections (to Services, and through the node) time out while established
        ones keep working; the kernel log says `nf_conntrack: table full, dropping packet`.
    Cause: more tracked flows than `net.netfilter.nf_conntrack_max` (kube-proxy raises it to
        max(32768 x CPUs, 131072) at start, never lowers it); usually many short-lived or
        half-open connections kept for the long default timeouts.
    How it is detected: the kernel log line (current and older spellings, with the doubled
        `nf_conntrack: nf_conntrack:` prefix); `nf_conntrack_count` / `nf_conntrack_max` from
        sysctl output (or `conntrack -C`) at or above 90% (critical) or 75% (warning); without
        those, the count a `conntrack -L` summary gives (`N flow entries have been shown`, printed
        on the terminal even when the listing is piped to grep) or `conntrack -L | wc -l` and
        `cat /proc/net/nf_conntrack | wc -l`, which is at least the table's use: -L lists one
        family and what its filters select; `early_drop` growing between
        two counter snapshots (the kernel is evicting entries to make room: full now). A kernel
        log line alone is a warning (it happened since boot); with the table near full or
        early drops growing it is critical. An `early_drop` total from one snapshot alone is
        info.
    Fix: raise nf_conntrack_max (and the hash size to max/4); in kube-proxy set
        conntrack.maxPerCore / conntrack.min so its start-up value is high enough; find the
        flood (`conntrack -L | awk '{print $5}' | sort | uniq -c | sort -rn | head`) and shorten
        nf_conntrack_tcp_timeout_* if idle flows pile up.
    References: https://kubernetes.io/docs/reference/config-api/kube-proxy-config.v1alpha1/;
        https://www.kernel.org/doc/html/latest/networking/nf_conntrack-sysctl.html
    """
    node = facts.node_state
    reasons: list[str] = []
    evidence: list[Cite] = []
    severity = None
    log = [(a, k, m.group(0)) for a, k in node.kernel_log if (m := TABLE_FULL.search(k.message))]
    if log:
        evidence += [Cite(a.name, k.line, k.text) for a, k, _ in (log[:1] + log[-1:] if len(log) > 1 else log)]
        reasons.append(f'the kernel logged "{log[-1][2]}" {len(log)} time(s)')
        severity = Severity.WARNING
    count_s = node.setting("net.netfilter.nf_conntrack_count")
    max_s = node.setting("net.netfilter.nf_conntrack_max") or node.setting("net.nf_conntrack_max")
    count = count_s.int() if count_s else None
    if count is None and node.conntrack_entries_total is not None:
        count = node.conntrack_entries_total[0]
        evidence.append(node.conntrack_entries_total[1])
    at_least = ""
    if count is None and (listed := node.conntrack_listed) is not None:
        count, at_least = listed[0], "at least "
        evidence.append(listed[1])
    cmax = max_s.int() if max_s else None
    if count is not None and cmax:
        share = count / cmax
        if share >= NEAR_FULL:
            shown = " (a listing of the table counted them)" if at_least else ""
            reasons.append(f"{at_least}{count} of {cmax} entries in use ({share:.0%}){shown}")
            evidence += setting_cites(node, ["net.netfilter.nf_conntrack_count", "net.netfilter.nf_conntrack_max"])
            level = Severity.CRITICAL if share >= FULL else Severity.WARNING
            severity = max(severity or level, level)
            if log and share >= NEAR_FULL:
                severity = Severity.CRITICAL
    reading = read_counters(node, [CONNTRACK + "early_drop"])
    if reading.growing:
        reasons.append(reading.describe() + " (entries evicted to make room: the table is full now)")
        evidence += reading.cites[:2]
        severity = Severity.CRITICAL
    elif reading.totals and not reasons:
        reasons.append(reading.describe())
        evidence += reading.cites[:1]
        severity = Severity.INFO
    if severity is None:
        return
    f = start(
        facts,
        "KP301",
        [],
        confidence=Confidence.HIGH if severity >= Severity.WARNING else Confidence.MEDIUM,
        severity=severity,
        summary="The conntrack table is or was full: " + "; ".join(reasons) + ".",
    )
    if reading.totals and not reading.growing and severity == Severity.INFO:
        f.summary += reading.confirm("conntrack -S")
    if log and severity == Severity.WARNING and count is None:
        f.summary += f" The table's current use is unknown (give `sysctl -a`); the log line is {SINCE_BOOT}."
    f.evidence = list(dict.fromkeys(evidence))[:5]
    f.ongoing = True if severity == Severity.CRITICAL else None
    target = max(2 * (cmax or KUBE_PROXY_MIN), 2 * (count or 0), KUBE_PROXY_MIN)
    target = (target + 65535) // 65536 * 65536
    adv = sysctl_advice(node, "net.netfilter.nf_conntrack_max", target)
    if adv:
        f.fix.append(
            f"Raise the limit: {adv}; and set the hash size to {target // 4}: "
            f"echo {target // 4} > /sys/module/nf_conntrack/parameters/hashsize."
        )
    f.fix.append(
        "Make kube-proxy keep it: KubeProxyConfiguration conntrack.maxPerCore "
        f"(default {KUBE_PROXY_MAX_PER_CORE}) or conntrack.min (default {KUBE_PROXY_MIN}); "
        "kube-proxy only ever raises the value at start."
    )
    f.fix.append(
        "Find what fills it: conntrack -L | awk '{print $5}' | sort | uniq -c | sort -rn | head; "
        "if idle flows pile up, lower net.netfilter.nf_conntrack_tcp_timeout_established "
        "(kube-proxy: conntrack.tcpEstablishedTimeout, default 24h)."
    )
    yield f

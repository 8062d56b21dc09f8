"""The agent's Prometheus metrics, named as kube-state-metrics names things: a ``kpdoctor_``
prefix, ``_info`` gauges of 1 for static facts, ``_total`` only for counters, timestamps as
``_timestamp_seconds``, and no free text in labels.

Findings carry a Service label only for the :data:`SERVICE_LABELS` worst per check code (by
severity, then as ranked); the rest are one number per code, so a node with 10,000 broken
Services does not make 10,000 series. Everything is read from the last finished cycle when
Prometheus scrapes (a custom collector): a scrape never waits for a cycle.
"""

from __future__ import annotations

import platform
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kpdoctor.about import __version__
from kpdoctor.model import Finding

if TYPE_CHECKING:
    from kpdoctor.agent.loop import Agent

SERVICE_LABELS = 20
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def services_named(f: Finding) -> list[tuple[str, str]]:
    """(namespace, name) of the Services a finding is about: its subject, and the Services its
    evidence cites (a finding about several Services cites each one's object)."""
    out: dict[tuple[str, str], None] = {}
    svc = f.subject.get("service")
    if svc and "/" in svc:
        ns, name = svc.split("/", 1)
        out[(ns, name.split(":", 1)[0])] = None
    for c in f.evidence:
        if c.text.startswith("Service ") and "/" in c.text:
            ns, name = c.text[len("Service ") :].split()[0].split("/", 1)
            out[(ns, name.split(":", 1)[0])] = None
    return list(out)


def service_labels(
    findings: list[Finding], limit: int = SERVICE_LABELS
) -> tuple[list[tuple[str, str, str, str, str]], dict[str, int]]:
    """The (code, cause, severity, namespace, service) series to give, at most ``limit`` Services
    per code, the worst first (severity, then rank); and per code how many Services were left out."""
    rows: defaultdict[str, list[tuple[int, int, str, str, str, str]]] = defaultdict(list)
    for i, f in enumerate(findings):
        for ns, name in services_named(f):
            rows[f.code].append((-int(f.severity), i, f.cause, f.severity.label, ns, name))
    named: list[tuple[str, str, str, str, str]] = []
    left: dict[str, int] = {}
    for code, found in sorted(rows.items()):
        found.sort()
        seen: set[tuple[str, str]] = set()
        for _, _, cause, sev, ns, name in found:
            if (ns, name) in seen:
                continue
            seen.add((ns, name))
            if len(seen) <= limit:
                named.append((code, cause, sev, ns, name))
        if len(seen) > limit:
            left[code] = len(seen) - limit
    return named, left


def _by(
    family: type[GaugeMetricFamily] | type[CounterMetricFamily],
    name: str,
    doc: str,
    label: str,
    values: Iterable[tuple[str, float]],
) -> Metric:
    """A metric of one label, a sample per value, in label order."""
    m = family(name, doc, labels=[label])
    for key, v in sorted(values):
        m.add_metric([key], v)
    return m


class AgentCollector(Collector):
    """Metrics of one :class:`~kpdoctor.agent.loop.Agent`, read at scrape time."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        a = self.agent
        st = a.status()
        info = GaugeMetricFamily("kpdoctor_build_info", "kpdoctor's version.", labels=["version", "python"])
        info.add_metric([__version__, platform.python_version()], 1)
        yield info
        mode = GaugeMetricFamily(
            "kpdoctor_proxy_mode_info", "The proxy mode kube-proxy runs in, as found.", labels=["node", "mode"]
        )
        if st.mode:
            mode.add_metric([a.node, st.mode], 1)
        yield mode

        yield _by(
            CounterMetricFamily,
            "kpdoctor_cycles",
            "Diagnosis cycles run, by how they ended.",
            "result",
            st.cycles.items(),
        )
        hist = HistogramMetricFamily("kpdoctor_cycle_duration_seconds", "Wall time of each cycle.")
        buckets, total = st.durations.snapshot()
        hist.add_metric([], [("+Inf" if b == float("inf") else str(b), c) for b, c in buckets], total)
        yield hist
        cpu = GaugeMetricFamily(
            "kpdoctor_cycle_cpu_seconds", "CPU time of the last cycle: the agent and the commands it ran."
        )
        if st.last_cpu is not None:
            cpu.add_metric([], st.last_cpu)
        yield cpu
        yield _by(
            GaugeMetricFamily,
            "kpdoctor_cycle_stage_cpu_seconds",
            "CPU time of the last cycle's stages (collect: with the node's commands).",
            "stage",
            st.stage_cpu.items(),
        )
        last = GaugeMetricFamily(
            "kpdoctor_last_successful_cycle_timestamp_seconds", "When the last cycle that produced a report ended."
        )
        if st.last_success is not None:
            last.add_metric([], st.last_success)
        yield last

        report = st.report
        findings = GaugeMetricFamily(
            "kpdoctor_findings", "Findings of the last cycle, by check code.", labels=["code", "cause", "severity"]
        )
        per_service = GaugeMetricFamily(
            "kpdoctor_finding_service",
            f"A Service a finding names (the {SERVICE_LABELS} worst per code; the rest are counted apart).",
            labels=["code", "cause", "severity", "namespace", "service"],
        )
        omitted = GaugeMetricFamily(
            "kpdoctor_finding_services_omitted",
            f"Services a finding names beyond the {SERVICE_LABELS} given a label, per code.",
            labels=["code"],
        )
        if report is not None:
            counts: Counter[tuple[str, str, str]] = Counter((f.code, f.cause, f.severity.label) for f in st.findings)
            for (code, cause, sev), n in sorted(counts.items()):
                findings.add_metric([code, cause, sev], n)
            named, left = service_labels(st.findings)
            for code, cause, sev, ns, name in named:
                per_service.add_metric([code, cause, sev, ns, name], 1)
            for code, n in sorted(left.items()):
                omitted.add_metric([code], n)
        yield findings
        yield per_service
        yield omitted

        verified = GaugeMetricFamily(
            "kpdoctor_services_verified",
            "Services of the last verification, by their worst result (ok, mismatch, uncertain).",
            labels=["result"],
        )
        cases = GaugeMetricFamily(
            "kpdoctor_verification_cases",
            "Service port x traffic class cases of the last verification, by how they were obtained.",
            labels=["how"],
        )
        ver = report.verification if report is not None else None
        if ver is not None and ver.evaluated:
            worst: dict[str, str] = {}
            order = {"ok": 0, "uncertain": 1, "mismatch": 2}
            for service, _, status in ver.statuses():
                if order.get(status, 0) >= order.get(worst.get(service, "ok"), 0):
                    worst[service] = status
            by = Counter(worst.values())
            for result in ("ok", "mismatch", "uncertain"):
                verified.add_metric([result], by.get(result, 0))
            cases.add_metric(["evaluated"], st.evaluated)
            cases.add_metric(["carried_over"], st.reused)
        yield verified
        yield cases
        stale = GaugeMetricFamily("kpdoctor_stale_rules", "Destinations the rules forward that no Service owns.")
        if ver is not None and ver.evaluated:
            stale.add_metric([], len(ver.stale))
        yield stale

        yield _by(
            CounterMetricFamily,
            "kpdoctor_collection_errors",
            "Artifacts a cycle could not collect, by artifact.",
            "artifact",
            st.collection_errors.items(),
        )
        yield _by(
            GaugeMetricFamily,
            "kpdoctor_cluster_source_up",
            "Whether the watch of a cluster resource is current (1) or serving what it last saw (0).",
            "resource",
            ((p.removeprefix("cluster/").removesuffix(".json"), 1 if ok else 0) for p, ok in st.sources.items()),
        )

        spiking = GaugeMetricFamily(
            "kpdoctor_counter_spiking",
            "Packet-loss counters growing beyond their budget (1) or not (0); absent before the baseline.",
            labels=["counter"],
        )
        delta = GaugeMetricFamily(
            "kpdoctor_counter_delta", "Growth of a packet-loss counter in the last cycle.", labels=["counter"]
        )
        for name, cs in sorted(a.gate.counters.items()):
            if cs.delta is not None:
                delta.add_metric([name], cs.delta)
                spiking.add_metric([name], 1 if a.gate.spiking(name) else 0)
        yield delta
        yield spiking

        if a.reporter is not None:
            w = a.reporter.stats
            yield _by(
                CounterMetricFamily,
                "kpdoctor_events",
                "Events written on the Node, by type (aggregated: a repeat counted).",
                "type",
                w.events.items(),
            )
            yield CounterMetricFamily("kpdoctor_events_dropped", "Events held back by the rate limit.", value=w.dropped)
            yield _by(
                CounterMetricFamily,
                "kpdoctor_cluster_write_errors",
                "Failed writes to the cluster, by what.",
                "what",
                w.errors.items(),
            )
        cond = GaugeMetricFamily(
            "kpdoctor_node_condition",
            "The Node condition the agent sets, by status (1 for the current one).",
            labels=["condition", "status"],
        )
        if st.condition is not None:
            for status in ("True", "False", "Unknown"):
                cond.add_metric([a.condition_type, status], 1 if st.condition.status == status else 0)
        yield cond

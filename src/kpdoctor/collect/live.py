"""One live collection: the node, kube-proxy and the API, into a redacted :class:`Bundle`.

The same bundle is what ``kpdoctor collect`` writes and what ``--live`` diagnoses (through a
temporary folder and the ordinary loader), so a live run and a later offline run of the bundle
give the same report.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from kpdoctor.bundle.writer import Bundle
from kpdoctor.collect.kube_proxy import collect_kube_proxy
from kpdoctor.collect.node import collect_node
from kpdoctor.collect.record import Budget, NotCollected, Progress, quiet, utc_now
from kpdoctor.collect.redact import IpPseudonyms, redact_secrets
from kpdoctor.collect.runner import Host, Runner

DEFAULT_TIMEOUT = 90.0
DEFAULT_INTERVAL = 5.0


@dataclass
class LiveOptions:
    host_root: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    node: str | None = None
    cluster: bool = True
    interval: float = DEFAULT_INTERVAL
    timeout: float = DEFAULT_TIMEOUT
    redact_ips: bool = False


class CollectError(Exception):
    """Collection cannot start at all (not root, no such host root)."""


def preflight(opts: LiveOptions) -> None:
    if opts.host_root is not None and not os.path.isdir(os.path.join(opts.host_root, "proc")):
        raise CollectError(f"--host-root {opts.host_root}: no proc/ under it (is the node's / mounted there?)")
    if os.geteuid() != 0:
        raise CollectError("live collection needs root (iptables-save, /proc of other processes); run it with sudo")
    if opts.interval < 0 or opts.timeout <= 0:
        raise CollectError("--interval must be >= 0 and --timeout > 0")


def collect(opts: LiveOptions, progress: Progress = quiet) -> Bundle:
    """Collect everything this node and (optionally) the API have; never raises for a failing read."""
    preflight(opts)
    started, t0 = utc_now(), time.monotonic()
    budget = Budget(opts.timeout)
    host = Host.detect(opts.host_root)
    runner = Runner(host, budget)
    node = collect_node(runner, progress, interval=min(opts.interval, max(opts.timeout / 3, 0)))
    kp = collect_kube_proxy(runner, progress, in_node_netns=not host.enter_netns)
    bundle = Bundle(
        artifacts=node.artifacts + kp.artifacts,
        skipped=node.skipped + kp.skipped,
        node=opts.node,
        hostname=node.hostname,
        collected_at=started,
        info={"host_root": opts.host_root or "/", "entered_node_netns": host.enter_netns},
    )
    if opts.cluster:
        from kpdoctor.collect.cluster import collect_cluster

        cluster = collect_cluster(
            node_hint=opts.node or node.hostname,
            node_addresses=node.addresses,
            kubeconfig=opts.kubeconfig,
            context=opts.context,
            budget=budget,
            progress=progress,
            kube_proxy_logs=not kp.logs_found,
        )
        bundle.artifacts += cluster.artifacts
        bundle.skipped += cluster.skipped
        if cluster.error:
            bundle.skipped.append(NotCollected("cluster/", cluster.error))
        bundle.node = opts.node or cluster.node
        bundle.info["cluster"] = cluster.error or "collected"
    else:
        bundle.skipped.append(NotCollected("cluster/", "not asked for (--no-cluster)"))
        bundle.info["cluster"] = "not asked for"
    _redact(bundle, opts.redact_ips)
    bundle.duration_ms = round((time.monotonic() - t0) * 1000)
    return bundle


def _redact(bundle: Bundle, ips: bool) -> None:
    """Secrets always; addresses (prefix-preserving pseudonyms, one mapping for the whole bundle)
    with ``--redact-ips``."""
    for a in bundle.artifacts:
        a.data = redact_secrets(a.path, a.data)
    bundle.info["redacted"] = {"secrets": True, "ips": ips}
    if not ips:
        return
    pseudo = IpPseudonyms()
    for a in bundle.artifacts:
        a.data = pseudo.data(a.data)
        a.source, a.stderr, a.note = pseudo.text(a.source), pseudo.text(a.stderr), pseudo.text(a.note)
    for s in bundle.skipped:
        s.reason = pseudo.text(s.reason)
    if bundle.node:
        bundle.node = pseudo.text(bundle.node)
    if bundle.hostname:
        bundle.hostname = pseudo.text(bundle.hostname)

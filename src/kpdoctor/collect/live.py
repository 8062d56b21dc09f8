"""One live collection: the node, kube-proxy and the API, into a redacted :class:`Bundle`.

The same bundle is what ``kpdoctor collect`` writes and what ``--live`` diagnoses (through a
temporary folder and the ordinary loader), so a live run and a later offline run of the bundle
give the same report.

The node's side never waits on the cluster's: the API is read in a thread of its own, every
call bounded by the collection's budget, and the collection stops waiting for it when the
budget is spent (a kubeconfig's exec plugin or a name lookup can hang where no call bound
reaches). What the API side had not read by then is listed as not collected, with why, and the
node's evidence is diagnosed all the same.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kpdoctor import deadline
from kpdoctor.bundle.writer import Bundle
from kpdoctor.collect.kube_proxy import LOG, LOG_PREVIOUS, collect_kube_proxy
from kpdoctor.collect.node import collect_node
from kpdoctor.collect.record import Budget, Collected, NotCollected, Progress, quiet, utc_now
from kpdoctor.collect.redact import IpPseudonyms, redact_secrets, redact_text
from kpdoctor.collect.runner import Host, Runner

if TYPE_CHECKING:
    from kpdoctor.collect.cluster import ClusterCollection

DEFAULT_TIMEOUT = 90.0
DEFAULT_INTERVAL = 5.0
GRACE = 2.0  # seconds the API side may overrun the budget (its last call ending) before it is left behind


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

    def step(name: str) -> None:
        deadline.stage(f"collecting ({name})")  # what a --timeout cut short, if it does
        progress(name)

    node = collect_node(runner, step, interval=min(opts.interval, max(opts.timeout / 3, 0)))
    kp = collect_kube_proxy(runner, step, in_node_netns=not host.enter_netns)
    bundle = Bundle(
        artifacts=node.artifacts + kp.artifacts,
        skipped=node.skipped + kp.skipped,
        node=opts.node,
        hostname=node.hostname,
        collected_at=started,
        info={"host_root": opts.host_root or "/", "entered_node_netns": host.enter_netns},
    )
    if opts.cluster:
        cluster = _cluster(opts, node.hostname, node.addresses, budget, step, logs=not kp.logs_found)
        bundle.artifacts += cluster.artifacts
        bundle.skipped += cluster.skipped
        if cluster.error:
            bundle.skipped.append(NotCollected("cluster/", cluster.error))
        bundle.node = opts.node or cluster.node
        bundle.info["cluster"] = cluster.error or "collected"
        _one_log_entry(bundle)
    else:
        bundle.skipped.append(NotCollected("cluster/", "not asked for (--no-cluster)"))
        bundle.info["cluster"] = "not asked for"
    _redact(bundle, opts.redact_ips)
    bundle.duration_ms = round((time.monotonic() - t0) * 1000)
    return bundle


def _cluster(opts: LiveOptions, hostname: str | None, addresses: list[str], budget: Budget, progress: Progress,
             *, logs: bool) -> ClusterCollection:
    """The API side (collect_cluster) in a thread, waited for until the budget is spent (and
    :data:`GRACE`); past that, what it read so far, the rest listed as not collected."""
    from kpdoctor.collect.cluster import ARTIFACTS, LOG_ARTIFACTS, ClusterCollection, collect_cluster

    partial = ClusterCollection()
    done: list[ClusterCollection] = []
    at = ["connecting to the API"]
    left_behind = threading.Event()

    def say(name: str) -> None:
        at[0] = name
        if not left_behind.is_set():  # once left behind, it names no stage of the run (deadline.stage)
            progress(name)

    def run() -> None:
        done.append(collect_cluster(
            node_hint=opts.node or hostname,
            node_addresses=addresses,
            kubeconfig=opts.kubeconfig,
            context=opts.context,
            budget=budget,
            progress=say,
            kube_proxy_logs=logs,
            into=partial,
        ))

    worker = threading.Thread(target=run, name="kpdoctor-cluster", daemon=True)
    worker.start()
    worker.join(budget.left() + min(GRACE, budget.total / 10))
    if done:
        return done[0]
    left_behind.set()
    got = ClusterCollection(artifacts=list(partial.artifacts), skipped=list(partial.skipped), node=partial.node)
    have = {a.path for a in got.artifacts} | {s.path for s in got.skipped}
    why = (f"not collected in time: the API side was still at '{at[0]}' when the collection's "
           f"{budget.total:g} s (--timeout) ran out")
    for path in (*ARTIFACTS, *(LOG_ARTIFACTS if logs else ())):
        if path not in have:
            got.skipped.append(NotCollected(path, why))
    return got


def _one_log_entry(bundle: Bundle) -> None:
    """One manifest entry per kube-proxy log path, when the node and the API both spoke of it: a
    log either had (the API's Pod log, the node's file) wins over the other's reason it is
    missing, a log with lines over an empty one, and two reasons become one saying both (the
    node's why no log is there, and the API's why no Pod log either)."""
    paths = (LOG, LOG_PREVIOUS)
    kept: dict[str, Collected] = {}
    for a in bundle.artifacts:
        if a.path in paths and (a.path not in kept or (a.data and not kept[a.path].data)):
            kept[a.path] = a
    bundle.artifacts = [a for a in bundle.artifacts if a.path not in paths or kept[a.path] is a]
    reasons: dict[str, list[str]] = {}
    for s in bundle.skipped:
        if s.path in paths and s.path not in kept:
            reasons.setdefault(s.path, []).append(s.reason)
    rest = [s for s in bundle.skipped if s.path not in paths]
    said = ("on the node: ", "from the API: ")
    for path, why in reasons.items():
        text = why[0] if len(why) == 1 else "; ".join(said[min(i, 1)] + w for i, w in enumerate(why))
        rest.append(NotCollected(path, text))
    bundle.skipped = rest


def _redact(bundle: Bundle, ips: bool) -> None:
    """Secrets always; addresses (prefix-preserving pseudonyms, one mapping for the whole bundle)
    with ``--redact-ips``."""
    for a in bundle.artifacts:
        a.data = redact_secrets(a.path, a.data)
        # the manifest quotes commands, their error output and reasons (an untrusted process's argv)
        a.source, a.stderr, a.note = redact_text(a.source), redact_text(a.stderr), redact_text(a.note)
    for s in bundle.skipped:
        s.reason = redact_text(s.reason)
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

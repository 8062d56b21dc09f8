"""Putting the agent together: which node, which API, the threads, and a clean stop.

The HTTP endpoints are served from the first second and nothing waits on the API server: the
client is made (a kubeconfig may run an exec plugin that hangs), the watches started and the
first lists read in the background (:class:`ClusterLink`), while the cycles run; the first cycle
waits for the first lists until :data:`SYNC_WAIT` at most (``--once``: half its ``--timeout``),
and what the cluster did not give by then is said as not collected.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any, cast

import kpdoctor.checks  # noqa: F401 - declares every check and log signature (an entry point)
from kpdoctor.agent.cluster import ClusterCache
from kpdoctor.agent.loop import Agent, AgentOptions
from kpdoctor.agent.node_status import NodeReporter
from kpdoctor.agent.server import AgentServer
from kpdoctor.collect.record import utc_now
from kpdoctor.collect.runner import Host
from kpdoctor.parse.system import parse_hostname

log = logging.getLogger("kpdoctor.agent")

SYNC_WAIT = 60.0  # the first cycle waits this long at most for the first lists


def node_name(flag: str | None, host_root: str | None) -> str | None:
    """``--node``, else ``$NODE_NAME`` (the downward API in the DaemonSet), else the node's hostname."""
    if flag:
        return flag
    if os.environ.get("NODE_NAME"):
        return os.environ["NODE_NAME"]
    host = Host.detect(host_root)
    try:
        with open(host.path("/proc/sys/kernel/hostname"), encoding="utf-8") as fh:
            return parse_hostname(fh.read())
    except OSError:
        return None


class ClusterLink:
    """The agent's way to the API, made in a thread of its own: the client, the watches (a
    :class:`ClusterCache`) and the writer of Events and the condition, handed to the agent when
    made (:meth:`Agent.attach`); until then a cycle says the cluster is not collected yet."""

    def __init__(
        self,
        agent: Agent,
        *,
        kubeconfig: str | None,
        context: str | None,
        events: bool,
        condition: bool,
        condition_type: str,
    ) -> None:
        self.agent = agent
        self.kubeconfig, self.context = kubeconfig, context
        self.events, self.condition, self.condition_type = events, condition, condition_type
        self.cache: ClusterCache | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._connect, name="kpdoctor-api", daemon=True)

    def start(self) -> None:
        self.agent.cluster_note = f"connecting to the API server since {utc_now()} (the client is not made yet)"
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self.cache is not None:
            self.cache.stop()

    def _connect(self) -> None:
        from kpdoctor.collect.kubeapi import api_client

        try:
            client: Any = api_client(self.kubeconfig, self.context)
        except ValueError as e:
            log.warning("cluster: %s: node side only", e)
            self.agent.attach(None, None, f"{e}: node side only")
            return
        if self._stop.is_set():
            return
        cache = ClusterCache(client, self.agent.node)
        reporter = None
        if self.events or self.condition:
            reporter = NodeReporter(
                client, self.agent.node, condition_type=self.condition_type, events=self.events,
                condition=self.condition,
            )  # fmt: skip
        self.cache = cache
        cache.start()
        self.agent.attach(cache, reporter)
        log.info("cluster: %s: watching Services, EndpointSlices, Node %s and its Pods", client.configuration.host,
                 self.agent.node)  # fmt: skip
        if cache.wait_synced(SYNC_WAIT) and cache.node_object() is None and not cache.errors().get(
            "cluster/nodes.json"
        ):
            log.warning(
                "no Node named %s in the cluster: give the Node's name with --node or $NODE_NAME "
                "(the DaemonSet's downward API spec.nodeName); this node's Pods and topology are unknown",
                self.agent.node,
            )


def build(
    opts: AgentOptions,
    *,
    kubeconfig: str | None,
    context: str | None,
    cluster: bool,
    events: bool,
    condition: bool,
    condition_type: str,
) -> tuple[Agent, ClusterLink | None, str]:
    """The agent and its way to the API (not made yet: :func:`serve` starts it); the third value
    says how the API is used (for the log)."""
    agent = Agent(opts, condition_type=condition_type)
    if not cluster:
        return agent, None, "not asked for (--no-cluster): node side only"
    link = ClusterLink(
        agent, kubeconfig=kubeconfig, context=context, events=events, condition=condition,
        condition_type=condition_type,
    )  # fmt: skip
    return agent, link, "connecting in the background (the endpoints and the cycles do not wait for it)"


def serve(
    agent: Agent,
    link: ClusterLink | None,
    listen: Sequence[tuple[str, int]] | tuple[str, int],
    once: bool = False,
) -> int:
    """Run until SIGTERM/SIGINT (``once``: one cycle, its summary on stdout). The endpoints (on
    ``listen``: one address, or several) are served before anything else starts."""
    t0 = time.monotonic()
    addresses: list[tuple[str, int]] = (
        [cast(tuple[str, int], listen)] if isinstance(listen[0], str) else list(cast(Sequence[tuple[str, int]], listen))
    )
    if once:
        if link is not None:
            agent.sync_until = t0 + min(SYNC_WAIT, agent.opts.timeout / 2)
            link.start()
        try:
            report = agent.run_cycle()
            st = agent.status()
            print(json.dumps(summary(agent), indent=1))
        finally:
            if link is not None:
                link.stop()
        if report is None:
            return 4
        return 1 if st.findings else 0
    server = AgentServer(agent, *addresses[0], also=addresses[1:])  # binding first: a port in use exits at once
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping after the current cycle", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.alive.set()  # the cycle thread is this one: it runs from now on
    server.start()
    where = ", ".join(f"{h}:{p}" for h, p in server.addresses)
    log.info("serving /metrics /healthz /readyz on %s (/run and /report from this node only)", where)
    if link is not None:
        agent.sync_until = t0 + SYNC_WAIT
        link.start()
    try:
        agent.run(stop)
    finally:
        server.alive.clear()
        server.stop()
        if link is not None:
            link.stop()
    return 0


def summary(agent: Agent) -> dict[str, Any]:
    """The last cycle in a few fields (the log line, ``--once``)."""
    st = agent.status()
    return {
        "cycle": st.cycle,
        "seconds": round(st.last_wall or 0.0, 3),
        "cpu_seconds": round(st.last_cpu or 0.0, 3),
        "cpu_by_stage": {k: round(v, 3) for k, v in st.stage_cpu.items()},
        "mode": st.mode,
        "cases": {"evaluated": st.evaluated, "carried_over": st.reused, "full": st.full},
        "findings": [
            {"code": f.code, "cause": f.cause, "service": f.subject.get("service"), "summary": f.summary}
            for f in st.findings
        ],
        "held_back": [f.code for f in st.held],
        "condition": None if st.condition is None else st.condition.__dict__,
        "error": st.last_error or None,
        "not_collected": {
            p.source: p.message.removeprefix("not collected: ")
            for p in (st.report.problems if st.report is not None else [])
            if p.message.startswith("not collected")
        },
    }

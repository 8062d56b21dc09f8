"""Putting the agent together: which node, which API, the threads, and a clean stop."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from typing import Any

from kpdoctor.agent.cluster import ClusterCache
from kpdoctor.agent.loop import Agent, AgentOptions
from kpdoctor.agent.node_status import NodeReporter
from kpdoctor.agent.server import AgentServer
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


def build(
    opts: AgentOptions,
    *,
    kubeconfig: str | None,
    context: str | None,
    cluster: bool,
    events: bool,
    condition: bool,
    condition_type: str,
) -> tuple[Agent, ClusterCache | None, str]:
    """The agent and its cluster watch; the third value says how the API is used (for the log)."""
    cache = reporter = None
    how = "not asked for (--no-cluster): node side only"
    if cluster:
        from kpdoctor.collect.cluster import api_client

        try:
            client: Any = api_client(kubeconfig, context)
        except ValueError as e:
            how = f"{e}: node side only"
        else:
            cache = ClusterCache(client, opts.node)
            if events or condition:
                reporter = NodeReporter(
                    client, opts.node, condition_type=condition_type, events=events, condition=condition
                )
            how = f"{client.configuration.host}: watching Services, EndpointSlices, Node {opts.node} and its Pods"
    agent = Agent(opts, cluster=cache, reporter=reporter, condition_type=condition_type)
    return agent, cache, how


def serve(agent: Agent, cache: ClusterCache | None, listen: tuple[str, int], once: bool = False) -> int:
    """Run until SIGTERM/SIGINT (``once``: one cycle, its summary on stdout)."""
    if cache is not None:
        cache.start()
        cache.wait_synced(SYNC_WAIT)
        if cache.node_object() is None and not cache.errors().get("cluster/nodes.json"):
            log.warning(
                "no Node named %s in the cluster: give the Node's name with --node or $NODE_NAME "
                "(the DaemonSet's downward API spec.nodeName); this node's Pods and topology are unknown",
                agent.node,
            )
    if once:
        report = agent.run_cycle()
        st = agent.status()
        print(json.dumps(summary(agent), indent=1))
        if cache is not None:
            cache.stop()
        if report is None:
            return 4
        return 1 if st.findings else 0
    server = AgentServer(agent, *listen)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping after the current cycle", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server.start()
    host, port = server.address
    log.info("serving /metrics /healthz /readyz on %s:%d (/run and /report from this node only)", host, port)
    server.alive.set()
    try:
        agent.run(stop)
    finally:
        server.alive.clear()
        server.stop()
        if cache is not None:
            cache.stop()
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
        "findings": [{"code": f.code, "cause": f.cause, "summary": f.summary} for f in st.findings],
        "held_back": [f.code for f in st.held],
        "condition": None if st.condition is None else st.condition.__dict__,
        "error": st.last_error or None,
    }

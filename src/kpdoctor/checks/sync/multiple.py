"""KP109: more than one kube-proxy runs on the node."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.checks.common import SYNC_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.knowledge import check, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse import kpconfig
from kpdoctor.parse.kubectl_table import PodRow, pod_rows

# kube-proxy's own healthz (10256) and metrics (10249) ports; a healthCheckNodePort clash
# ("Failed to start healthcheck" on 3xxxx, dual-stack) is not a second process.
PORT_IN_USE = signature(
    "kube-proxy-port-in-use",
    "address already in use",
    r":(10256|10249): bind: address already in use",
)
SHIM = ("containerd-shim", "containerd-shim-runc-v2", "docker-containerd-shim", "conmon", "crun", "runc")


@check(
    "KP109",
    cause="multiple-kube-proxy",
    title="More than one kube-proxy runs on this node",
    severity=Severity.WARNING,
    needs=[Kind.PROCESSES, Kind.KUBE_PROXY_LOG, Kind.K8S_OBJECTS, Kind.KUBECTL_PODS],
    # the second instance (a DaemonSet next to a distribution's static Pod, a host service) is
    # often started without the first one's privileges: its refusals are its own
    explains=(*SYNC_SYMPTOMS, "kube-proxy-not-privileged"),
)
def multiple_kube_proxy(facts: Facts) -> Iterator[Finding]:
    """Two kube-proxies program the node; the one that wins is not the one the DaemonSet manages.

    Symptom: upgrading or reconfiguring the kube-proxy DaemonSet changes nothing on the node;
        `ps -ef | grep kube-proxy` shows two processes; one of them logs
        `listen tcp 0.0.0.0:10256: bind: address already in use` (healthz) or `:10249` (metrics),
        or, started without the first one's privileges, iptables' `Permission denied (you must
        be root)`.
    Cause: a leftover kube-proxy started outside the Pod (a systemd unit from an old install, or
        a container runtime whose storage directory was moved without migrating its state, so
        a second copy was started), running next to the DaemonSet's Pod.
    How it is detected: more than one kube-proxy process in the process list, in the network
        namespace the list was taken in when it says (`ps -o netns`: kind's nodes on one host each
        run theirs), and which of them is not under a container shim; the healthz/metrics port
        clash in the log; several kube-proxy Pods scheduled to this node, from the Pod objects
        or from the rows of a `kubectl get pods -o wide` table (with or without its header; two
        or more kube-proxy Pods Running on one NODE, on this node when its name is known; a
        table without the NODE column proves nothing here).
    Fix: stop and disable the unmanaged process (`systemctl disable --now kube-proxy`, or kill
        the bare process; TKE provides fix-kube-proxy.sh); then restart the DaemonSet's Pod so
        it owns ports 10256/10249 and the rules.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/85483;
        https://github.com/kubernetes/kops/issues/4549
    """
    procs = [
        p
        for p in facts.processes
        if p.program in ("kube-proxy", "hyperkube")
        and kpconfig.kube_proxy_args(p.argv) is not None
        and facts.in_listing_netns(p)  # one in another network namespace is another node's
    ]
    by_pid = {p.pid: p for p in facts.processes}
    bare = [
        p
        for p in procs
        if p.ppid is not None and (p.ppid == 1 or (by_pid.get(p.ppid) and by_pid[p.ppid].program not in SHIM))
    ]
    port_hits = facts.log.hits(PORT_IN_USE.id)
    node = facts.node.name if facts.node else None
    pods = [
        p.obj
        for p in facts.cluster.pods(facts.kube_proxy_pods)
        if node and p.node_name == node and p.phase in (None, "Running")
    ]
    rows = _table_duplicates(facts, node)
    if len(procs) < 2 and not port_hits and len(pods) < 2 and not rows:
        return
    if port_hits:
        f = start(
            facts,
            "KP109",
            port_hits,
            confidence=Confidence.MEDIUM,
            summary=f"kube-proxy could not bind its port {port_hits[-1].groups[0]}: another process already holds it.",
            severity=Severity.WARNING,
        )
    else:
        f = start(facts, "KP109", [], confidence=Confidence.HIGH, severity=Severity.WARNING)
    if len(procs) >= 2:
        f.confidence = Confidence.HIGH
        f.summary = (
            f.summary + " " if f.summary else ""
        ) + f"{len(procs)} kube-proxy processes run (PIDs {', '.join(str(p.pid) for p in procs)})."
        if bare:
            pids = ", ".join(str(p.pid) for p in bare)
            f.summary += f" Not managed by a Pod: PID {pids} (its parent is not a container shim)."
        for p in procs[:4]:
            f.evidence.append(Cite(facts.process_artifact(), p.line, p.command))
    if len(pods) >= 2:
        f.summary += f" {len(pods)} kube-proxy Pods are scheduled to this node."
        for pod in pods[:3]:
            f.evidence.append(Cite(pod.artifact, pod.line, pod.ref))
    for where, same in list(rows.items())[:3]:
        if len(pods) >= 2 and where == node:
            continue  # the objects already said so
        names = ", ".join(r.name for _, r in same)
        f.summary = (f.summary + " " if f.summary else "") + (
            f"{len(same)} kube-proxy Pods are Running on node {where}: {names}."
        )
        if all(r.all_ready for _, r in same):
            f.confidence = Confidence.HIGH
        for art, r in same[:4]:
            f.evidence.append(Cite(art.name, art.first_line + r.line, r.text))
    static = [r.name for same in rows.values() for _, r in same if r.node and r.name == f"kube-proxy-{r.node}"]
    f.fix = [
        *(
            [
                f"{', '.join(static)}: the name kube-proxy-<node> is a static Pod's (a manifest in the node's "
                "/etc/kubernetes/manifests or the distribution's own, e.g. RKE2/k3s): run kube-proxy either as that "
                "static Pod or as the DaemonSet, not both (delete the DaemonSet, or the manifest)."
            ]
            if static
            else []
        ),
        "Stop and disable the kube-proxy that no Pod manages (`systemctl disable --now kube-proxy`, or kill the bare "
        "process; on TKE run fix-kube-proxy.sh).",
        "Restart the DaemonSet's kube-proxy Pod so it owns ports 10256/10249 and the node's rules.",
    ]
    yield f


def _table_duplicates(facts: Facts, node: str | None) -> dict[str, list[tuple[Artifact, PodRow]]]:
    """Nodes on which a ``kubectl get pods -o wide`` table shows two or more kube-proxy Pods
    Running (only this node, when its name is known), with the rows that say so."""
    by_node: dict[str, list[tuple[Artifact, PodRow]]] = {}
    seen: set[tuple[str | None, str]] = set()
    for a in facts.of(Kind.KUBECTL_PODS):
        for r in pod_rows(a.read_text()):
            if not r.is_kube_proxy or r.node is None or r.status != "Running" or (r.namespace, r.name) in seen:
                continue
            if node is not None and r.node != node:
                continue
            seen.add((r.namespace, r.name))
            by_node.setdefault(r.node, []).append((a, r))
    return {n: rows for n, rows in by_node.items() if len(rows) >= 2}

"""KP129: kube-proxy reaches the apiserver through the `kubernetes` Service address, which only
kube-proxy itself programs: on a node it has not yet synced, it never reaches it."""

from __future__ import annotations

from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import RESTORE_SYMPTOMS, start
from kpdoctor.facts import Facts
from kpdoctor.facts.log import cite_line, is_other_writer
from kpdoctor.knowledge import check, messages, signature
from kpdoctor.model import Confidence, Finding, Severity

# kube-proxy given neither a kubeconfig nor a master URL (or a config file that names none)
IN_CLUSTER = messages(
    "kube-proxy-in-cluster-config",
    "kube-proxy/server-in-cluster-config-fallback",
    "kube-proxy/server-in-cluster-config",
)
# kube-proxy's own request to the apiserver that never got through; the address it dialled
APISERVER_DIAL_FAILED = signature(
    "apiserver-dial-failed",
    "dial tcp ",
    r"https://([0-9.]+|\[[0-9a-fA-F:]+\]):443(/api[^ ]*): dial tcp [^ ]+: "
    r"(i/o timeout|connect: connection refused|connect: no route to host|connect: network is unreachable)",
    failure=True,
)
# The `kubernetes` Service's address in the Service ranges that installers default to (kubeadm and
# most installers 10.96.0.0/12, kube-up 10.0.0.0/24, k3s 10.43.0.0/16, EKS 10.100.0.0/16 and
# 172.20.0.0/16, kubespray 10.233.0.0/18, kops 100.64.0.0/13, the hard way 10.32.0.0/24)
DEFAULT_SERVICE_VIPS = frozenset(
    {"10.96.0.1", "10.0.0.1", "10.43.0.1", "10.100.0.1", "172.20.0.1", "10.233.0.1", "100.64.0.1", "10.32.0.1"}
)


# What kube-proxy asks the apiserver for (another program's request to that address is not its)
KUBE_PROXY_READS = ("/api/v1/nodes", "/api/v1/services", "/api/v1/endpoints", "/apis/discovery.k8s.io/")


def _kubernetes_vips(facts: Facts) -> set[str]:
    """The `default/kubernetes` Service's cluster IPs, when the Services are given."""
    return {ip for svc in facts.cluster.services if svc.key == "default/kubernetes" for ip in svc.cluster_ips}


@check(
    "KP129",
    cause="apiserver-unreachable-via-service-vip",
    title="kube-proxy reaches the apiserver through the Service address only it programs",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG],
    explains=("node-ip-unresolved", "apiserver-connection-stale", *RESTORE_SYMPTOMS),
)
def apiserver_via_vip(facts: Facts) -> Iterator[Finding]:
    """kube-proxy talks to the apiserver through the `kubernetes` Service VIP, which nothing has programmed.

    Symptom: on a new node (or after a reinstall) kube-proxy logs `Failed to retrieve node info:
        Get https://10.96.0.1:443/api/v1/nodes/NODE: dial tcp 10.96.0.1:443: i/o timeout`,
        falls back to 127.0.0.1 as node IP and never lists a Service; nothing on the node
        reaches any ClusterIP.
    Cause: kube-proxy was given neither a kubeconfig nor a master URL (a missing or ignored
        `clientConnection.kubeconfig`, a config file that overrides the flag), so it uses the
        in-cluster config: `KUBERNETES_SERVICE_HOST`, the `kubernetes` Service's ClusterIP.
        Only kube-proxy's own rules make that address reach the apiserver, so on a node it has
        not programmed yet it waits for itself.
    How it is detected: kube-proxy's own failed requests to the apiserver (for its Node,
        Services, Endpoints or EndpointSlices) at an address that is the `kubernetes`
        Service's ClusterIP (from the Services given), or that it reached through the
        in-cluster config (its "Falling back to in-cluster config" line), or that is the first
        address of a Service range installers default to (10.96.0.1, 10.0.0.1, 10.43.0.1 ...;
        medium confidence). Other components failing to reach that address are its
        consequence, not this cause.
    Fix: give kube-proxy the apiserver's real address: a kubeconfig (`--kubeconfig`, or
        `clientConnection.kubeconfig` in its config file, which takes precedence over flags)
        or `--master`/`KUBERNETES_SERVICE_HOST` set to the apiserver's (or its load
        balancer's) address.
    References: https://github.com/kubernetes/kubeadm/issues/570;
        https://github.com/kubernetes/kubernetes-anywhere/issues/232
    """
    failed = [
        h
        for h in facts.log.hits(APISERVER_DIAL_FAILED.id)
        if not is_other_writer(h) and len(h.groups) > 1 and str(h.groups[1]).startswith(KUBE_PROXY_READS)
    ]
    if not failed:
        return
    in_cluster = [h for h in facts.log.hits(*IN_CLUSTER.ids) if not is_other_writer(h)]
    vips = _kubernetes_vips(facts)
    dialled = {str(h.groups[0]).strip("[]") for h in failed}
    known = dialled & vips
    if known:
        why, confidence = "it is the `kubernetes` Service's ClusterIP in the Services given", Confidence.HIGH
    elif in_cluster:
        why, confidence = "kube-proxy fell back to the in-cluster config, which names that Service", Confidence.HIGH
    elif dialled & DEFAULT_SERVICE_VIPS and not vips:
        why, confidence = (
            "it is the `kubernetes` Service's address in a Service range installers default to",
            (Confidence.MEDIUM),
        )
    else:
        return
    addr = sorted(known or dialled & DEFAULT_SERVICE_VIPS or dialled)[0]
    f = start(
        facts, "KP129", [h for h in failed if str(h.groups[0]).strip("[]") == addr] or failed, confidence=confidence
    )
    f.confidence_reason = f"kube-proxy's own requests to {addr} fail, and {why}"
    f.summary = (
        f"kube-proxy cannot reach the apiserver at {addr}:443 ({f.occurrences or len(failed)} failed request(s)), "
        f"the `kubernetes` Service's address ({why}): that address only reaches "
        "the apiserver through the rules kube-proxy itself writes, so on this node it waits for itself. It finds "
        "neither its Node nor any Service, and programs nothing."
    )
    for h in in_cluster[:1]:
        f.evidence.append(cite_line(h))
    f.ongoing = True if f.ongoing is None else f.ongoing
    f.fix = [
        "Give kube-proxy the apiserver's real address: a kubeconfig (`--kubeconfig`, or `clientConnection.kubeconfig` "
        "in its config file, which wins over flags) or `--master` / `KUBERNETES_SERVICE_HOST` set to the apiserver's "
        "or its load balancer's address, then restart it.",
    ]
    yield f

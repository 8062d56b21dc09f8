"""Write the API recordings of this directory: ``python tests/data/kubeapi/generate.py``.

One small kubeadm-style cluster (three Nodes; the node under diagnosis is ``worker-1.lab.internal``,
InternalIP 10.0.1.17), its objects in the shape the API server serves them (list items without
``kind``/``apiVersion``, ``endpoints: null`` in an empty EndpointSlice, ``remainingItemCount`` only
without a selector, continue tokens as the etcd3 store encodes them), and the failure ``Status``
bodies of k8s.io/apimachinery (403 Forbidden, 404 NotFound, 410 Expired, 401, 400 for a previous
log that does not exist). Each recording is one collector run, in the order the collector asks;
pages are deliberately small (the server may answer fewer items than ``limit``; clients follow
``continue``), so three pages need no thousand Services.
"""

from __future__ import annotations

import base64
import copy
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from kubeapi_replay import (  # noqa: E402
    continue_token,
    expired,
    forbidden,
    get_exchange,
    list_exchanges,
    not_found,
    not_found_path,
    object_path,
    unauthorized,
)

Obj = dict[str, Any]
NODE = "worker-1.lab.internal"
SA = "system:serviceaccount:default:kpdoctor"
LOG_QUERY = {"container": "kube-proxy", "limitBytes": str(32 * 1024 * 1024), "timestamps": "false"}
T0 = "2024-04-02T08:11:47Z"


def uid(n: int) -> str:
    return f"5f0c3a1e-{n:04x}-4c2b-9d7e-{n * 7919:012x}"


def meta(name: str, ns: str | None, n: int, **extra: Any) -> Obj:
    m: Obj = {"name": name}
    if ns:
        m["namespace"] = ns
    m.update({"uid": uid(n), "resourceVersion": str(1000 + n), "creationTimestamp": T0})
    m.update(extra)
    return m


def owner(api_version: str, kind: str, name: str, n: int) -> Obj:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid(n), "controller": True,
            "blockOwnerDeletion": True}


# -- Nodes -----------------------------------------------------------------------------------------------


def node(name: str, ip: str, n: int, cidr: str, control_plane: bool = False) -> Obj:
    labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    if control_plane:
        labels["node-role.kubernetes.io/control-plane"] = ""
    return {
        "kind": "Node", "apiVersion": "v1",
        "metadata": meta(name, None, n, labels=labels, annotations={
            "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///var/run/containerd/containerd.sock",
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true"}),
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr],
                 **({"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}
                    if control_plane else {})},
        "status": {
            "capacity": {"cpu": "4", "ephemeral-storage": "81106868Ki", "hugepages-2Mi": "0", "memory": "16365912Ki",
                         "pods": "110"},
            "allocatable": {"cpu": "4", "ephemeral-storage": "74747094711", "hugepages-2Mi": "0",
                            "memory": "16263512Ki", "pods": "110"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": "2024-04-12T09:20:03Z",
                 "lastTransitionTime": T0, "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available"},
                {"type": "DiskPressure", "status": "False", "lastHeartbeatTime": "2024-04-12T09:20:03Z",
                 "lastTransitionTime": T0, "reason": "KubeletHasNoDiskPressure",
                 "message": "kubelet has no disk pressure"},
                {"type": "PIDPressure", "status": "False", "lastHeartbeatTime": "2024-04-12T09:20:03Z",
                 "lastTransitionTime": T0, "reason": "KubeletHasSufficientPID",
                 "message": "kubelet has sufficient PID available"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-04-12T09:20:03Z",
                 "lastTransitionTime": "2024-04-02T08:12:31Z", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status"},
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": f"{n:032x}", "systemUUID": uid(n + 500), "bootID": uid(n + 600),
                         "kernelVersion": "6.1.0-18-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)",
                         "containerRuntimeVersion": "containerd://1.6.28", "kubeletVersion": "v1.29.3",
                         "kubeProxyVersion": "v1.29.3", "operatingSystem": "linux", "architecture": "amd64"},
        },
    }


NODES = [
    node("cp-1.lab.internal", "10.0.1.10", 1, "10.244.0.0/24", control_plane=True),
    node(NODE, "10.0.1.17", 2, "10.244.1.0/24"),
    node("worker-2.lab.internal", "10.0.1.18", 3, "10.244.2.0/24"),
]

# -- Services and their EndpointSlices ---------------------------------------------------------------


def service(name: str, ns: str, n: int, ip: str, ports: list[Obj], selector: Obj | None, **spec: Any) -> Obj:
    s: Obj = {"clusterIP": ip, "clusterIPs": [ip], "internalTrafficPolicy": "Cluster", "ipFamilies": ["IPv4"],
              "ipFamilyPolicy": "SingleStack", "ports": ports}
    if selector is not None:
        s["selector"] = selector
    s.update({"sessionAffinity": "None", "type": "ClusterIP"})
    s.update(spec)
    labels = {"app": name} if selector else {"component": "apiserver", "provider": "kubernetes"}
    return {"kind": "Service", "apiVersion": "v1", "metadata": meta(name, ns, n, labels=labels), "spec": s,
            "status": {"loadBalancer": {}}}


def port(name: str, p: int, target: int | str, node_port: int | None = None, protocol: str = "TCP") -> Obj:
    out: Obj = {"name": name, "protocol": protocol, "port": p, "targetPort": target}
    if node_port:
        out["nodePort"] = node_port
    return out


SERVICES = [
    service("kubernetes", "default", 10, "10.96.0.1", [port("https", 443, 6443)], None),
    service("web", "default", 11, "10.96.41.7", [port("http", 80, 8080)], {"app": "web"}),
    service("db", "default", 12, "None", [port("pg", 5432, 5432)], {"app": "db"}),
    service("kube-dns", "kube-system", 13, "10.96.0.10",
            [port("dns", 53, 53, protocol="UDP"), port("dns-tcp", 53, 53), port("metrics", 9153, 9153)],
            {"k8s-app": "kube-dns"}),
    service("node-exporter", "monitoring", 14, "10.96.133.2", [port("metrics", 9100, 9100, 31910)],
            {"app": "node-exporter"}, type="NodePort", externalTrafficPolicy="Cluster"),
    service("frontend", "shop", 15, "10.96.200.14", [port("http", 80, "http", 30080)], {"app": "frontend"},
            type="LoadBalancer", externalTrafficPolicy="Local", healthCheckNodePort=32001,
            allocateLoadBalancerNodePorts=True),
    service("cart", "shop", 16, "10.96.200.99", [port("http", 8080, 8080)], {"app": "cart"}),
]
SERVICES[2]["spec"]["clusterIPs"] = ["None"]
SERVICES[5]["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.40", "ipMode": "VIP"}]}}


def endpoint(ip: str, node_name: str, pod: str | None, ns: str, n: int, ready: bool = True) -> Obj:
    e: Obj = {"addresses": [ip], "conditions": {"ready": ready, "serving": ready, "terminating": False}}
    if pod:
        e["targetRef"] = {"kind": "Pod", "namespace": ns, "name": pod, "uid": uid(n)}
    e["nodeName"] = node_name
    return e


def slice_(svc: Obj, suffix: str, n: int, endpoints: list[Obj] | None, ports: list[Obj]) -> Obj:
    name, ns = svc["metadata"]["name"], svc["metadata"]["namespace"]
    managed = "endpointslicemirroring-controller.k8s.io" if name == "kubernetes" else "endpointslice-controller.k8s.io"
    m = meta(f"{name}{suffix}", ns, n, labels={"endpointslice.kubernetes.io/managed-by": managed,
                                                "kubernetes.io/service-name": name})
    if name != "kubernetes":
        m["generateName"] = f"{name}-"
        m["ownerReferences"] = [owner("v1", "Service", name, int(svc["metadata"]["uid"][9:13], 16))]
    return {"kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1", "metadata": m, "addressType": "IPv4",
            "endpoints": endpoints, "ports": ports}


def sport(name: str, p: int, protocol: str = "TCP") -> Obj:
    return {"name": name, "protocol": protocol, "port": p}


SLICES = [
    slice_(SERVICES[0], "", 30, [{"addresses": ["10.0.1.10"], "conditions": {"ready": True}}], [sport("https", 6443)]),
    slice_(SERVICES[1], "-x4k2p", 31, [endpoint("10.244.1.12", NODE, "web-5d8f7c9b6-abcde", "default", 51),
                                        endpoint("10.244.1.13", NODE, "web-5d8f7c9b6-fghij", "default", 52)],
           [sport("http", 8080)]),
    slice_(SERVICES[2], "-9vz7q", 32, [endpoint("10.244.1.20", NODE, "db-0", "default", 53)], [sport("pg", 5432)]),
    slice_(SERVICES[3], "-m2n8d", 33, [endpoint("10.244.2.4", "worker-2.lab.internal", "coredns-76f75df574-2xjgp",
                                                 "kube-system", 60),
                                        endpoint("10.244.2.5", "worker-2.lab.internal", "coredns-76f75df574-wq8nd",
                                                 "kube-system", 61)],
           [sport("dns", 53, "UDP"), sport("dns-tcp", 53), sport("metrics", 9153)]),
    slice_(SERVICES[4], "-7cw2m", 34, [endpoint("10.0.1.17", NODE, "node-exporter-hq7dz", "monitoring", 62),
                                        endpoint("10.0.1.18", "worker-2.lab.internal", "node-exporter-k2l9s",
                                                 "monitoring", 63)],
           [sport("metrics", 9100)]),
    slice_(SERVICES[5], "-pp6rn", 35, [endpoint("10.244.2.31", "worker-2.lab.internal", "frontend-6b9f4d-zz5rt",
                                                 "shop", 64, ready=False)],
           [sport("http", 8080)]),
    slice_(SERVICES[6], "-tk4d8", 36, None, [sport("http", 8080)]),  # no endpoints: the API writes null
]


def endpoints_of(s: Obj) -> Obj:
    """The v1 Endpoints the endpoints controller writes for the same backends."""
    ready = [e for e in s["endpoints"] or [] if e["conditions"].get("ready")]
    not_ready = [e for e in s["endpoints"] or [] if not e["conditions"].get("ready")]

    def addr(e: Obj) -> Obj:
        a: Obj = {"ip": e["addresses"][0]}
        if "nodeName" in e:
            a["nodeName"] = e["nodeName"]
        if "targetRef" in e:
            a["targetRef"] = e["targetRef"]
        return a

    name = s["metadata"]["labels"]["kubernetes.io/service-name"]
    subset: Obj = {}
    if ready:
        subset["addresses"] = [addr(e) for e in ready]
    if not_ready:
        subset["notReadyAddresses"] = [addr(e) for e in not_ready]
    out: Obj = {"kind": "Endpoints", "apiVersion": "v1",
                "metadata": meta(name, s["metadata"]["namespace"], int(s["metadata"]["uid"][9:13], 16) + 100,
                                 labels={"app": name} if name != "kubernetes" else {"endpointslice.kubernetes.io/"
                                                                                    "skip-mirror": "true"})}
    if subset:
        subset["ports"] = s["ports"]
        out["subsets"] = [subset]
    return out


ENDPOINTS = [endpoints_of(s) for s in SLICES]

# -- Pods on the node, their controllers, the DaemonSets -----------------------------------------------------


def container_status(name: str, image: str, n: int, restarts: int = 0, last_exit: int | None = None) -> Obj:
    last: Obj = {}
    if last_exit is not None:
        last = {"terminated": {"exitCode": last_exit, "reason": "Error", "startedAt": "2024-04-12T08:58:40Z",
                               "finishedAt": "2024-04-12T09:13:05Z", "containerID": f"containerd://{n:064x}"}}
    return {"name": name, "state": {"running": {"startedAt": "2024-04-12T09:14:30Z"}}, "lastState": last,
            "ready": True, "restartCount": restarts, "image": image,
            "imageID": f"{image.split(':')[0]}@sha256:{n * 31337:064x}",
            "containerID": f"containerd://{n + 1:064x}", "started": True}


def pod(name: str, ns: str, n: int, owner_ref: Obj | None, labels: Obj, containers: list[Obj], statuses: list[Obj],
        ip: str, host_network: bool = False) -> Obj:
    m = meta(name, ns, n, labels=labels)
    if owner_ref is not None:
        m["ownerReferences"] = [owner_ref]
    spec: Obj = {"containers": containers, "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                 "dnsPolicy": "ClusterFirst", "serviceAccountName": "default", "nodeName": NODE,
                 "securityContext": {}, "schedulerName": "default-scheduler", "priority": 0,
                 "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"}
    if host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return {"kind": "Pod", "apiVersion": "v1", "metadata": m, "spec": spec,
            "status": {"phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None,
                                       "lastTransitionTime": "2024-04-12T09:14:31Z"}],
                       "hostIP": "10.0.1.17", "hostIPs": [{"ip": "10.0.1.17"}], "podIP": ip, "podIPs": [{"ip": ip}],
                       "startTime": T0, "containerStatuses": statuses, "qosClass": "BestEffort"}}


def ctr(name: str, image: str, **extra: Any) -> Obj:
    return {"name": name, "image": image, "resources": {}, "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent", **extra}


KP_IMAGE = "registry.k8s.io/kube-proxy:v1.29.3"
KUBE_PROXY_CTR = ctr("kube-proxy", KP_IMAGE,
                     command=["/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf",
                              "--hostname-override=$(NODE_NAME)"],
                     env=[{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                           "fieldPath": "spec.nodeName"}}}],
                     securityContext={"privileged": True},
                     volumeMounts=[{"name": "kube-proxy", "mountPath": "/var/lib/kube-proxy"},
                                   {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                                   {"name": "lib-modules", "readOnly": True, "mountPath": "/lib/modules"}])
CALICO_CTR = ctr("calico-node", "docker.io/calico/node:v3.27.2", securityContext={"privileged": True})

PODS = [
    pod("kube-proxy-x7k2p", "kube-system", 40, owner("apps/v1", "DaemonSet", "kube-proxy", 80),
        {"controller-revision-hash": "7c6d8f5b9", "k8s-app": "kube-proxy", "pod-template-generation": "1"},
        [KUBE_PROXY_CTR], [container_status("kube-proxy", KP_IMAGE, 40, restarts=2, last_exit=1)], "10.0.1.17",
        host_network=True),
    pod("calico-node-5xq9d", "kube-system", 41, owner("apps/v1", "DaemonSet", "calico-node", 81),
        {"controller-revision-hash": "5d9b7c4f8", "k8s-app": "calico-node", "pod-template-generation": "1"},
        [CALICO_CTR], [container_status("calico-node", "docker.io/calico/node:v3.27.2", 41)], "10.0.1.17",
        host_network=True),
    pod("web-5d8f7c9b6-abcde", "default", 51, owner("apps/v1", "ReplicaSet", "web-5d8f7c9b6", 90),
        {"app": "web", "pod-template-hash": "5d8f7c9b6"}, [ctr("web", "nginx:1.25")],
        [container_status("web", "docker.io/library/nginx:1.25", 51)], "10.244.1.12"),
    pod("web-5d8f7c9b6-fghij", "default", 52, owner("apps/v1", "ReplicaSet", "web-5d8f7c9b6", 90),
        {"app": "web", "pod-template-hash": "5d8f7c9b6"}, [ctr("web", "nginx:1.25")],
        [container_status("web", "docker.io/library/nginx:1.25", 52)], "10.244.1.13"),
    pod("db-0", "default", 53, owner("apps/v1", "StatefulSet", "db", 92),
        {"app": "db", "apps.kubernetes.io/pod-index": "0", "controller-revision-hash": "db-6c8d9f7b5",
         "statefulset.kubernetes.io/pod-name": "db-0"}, [ctr("postgres", "postgres:16")],
        [container_status("postgres", "docker.io/library/postgres:16", 53)], "10.244.1.20"),
    pod("backup-28211400-q8z7n", "ops", 54, owner("batch/v1", "Job", "backup-28211400", 93),
        {"batch.kubernetes.io/controller-uid": uid(93), "batch.kubernetes.io/job-name": "backup-28211400",
         "controller-uid": uid(93), "job-name": "backup-28211400"}, [ctr("backup", "busybox:1.36")],
        [container_status("backup", "docker.io/library/busybox:1.36", 54)], "10.244.1.31"),
    pod(f"haproxy-{NODE}", "kube-system", 55, {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": uid(2),
                                                "controller": True},
        {"component": "haproxy", "tier": "control-plane"}, [ctr("haproxy", "haproxy:2.9")],
        [container_status("haproxy", "docker.io/library/haproxy:2.9", 55)], "10.0.1.17", host_network=True),
]
PODS[6]["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "8d7c1f0a", "kubernetes.io/config.source": "file"}
PODS[0]["spec"]["serviceAccountName"] = "kube-proxy"
PODS[0]["spec"]["priorityClassName"] = "system-node-critical"


def daemonset(name: str, ns: str, n: int, labels: Obj, pod_spec: Obj) -> Obj:
    return {"kind": "DaemonSet", "apiVersion": "apps/v1",
            "metadata": meta(name, ns, n, labels=labels, generation=1,
                             annotations={"deprecated.daemonset.template.generation": "1"}),
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"creationTimestamp": None, "labels": labels}, "spec": pod_spec},
                     "updateStrategy": {"type": "RollingUpdate",
                                        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                     "revisionHistoryLimit": 10},
            "status": {"currentNumberScheduled": 3, "numberMisscheduled": 0, "desiredNumberScheduled": 3,
                       "numberReady": 3, "observedGeneration": 1, "updatedNumberScheduled": 3,
                       "numberAvailable": 3}}


DAEMONSETS = [
    daemonset("kube-proxy", "kube-system", 80, {"k8s-app": "kube-proxy"},
              {"containers": [KUBE_PROXY_CTR], "hostNetwork": True, "serviceAccountName": "kube-proxy",
               "priorityClassName": "system-node-critical", "nodeSelector": {"kubernetes.io/os": "linux"}}),
    daemonset("calico-node", "kube-system", 81, {"k8s-app": "calico-node"},
              {"containers": [CALICO_CTR], "hostNetwork": True, "serviceAccountName": "calico-node"}),
    daemonset("fluent-bit", "logging", 82, {"app.kubernetes.io/name": "fluent-bit"},
              {"containers": [ctr("fluent-bit", "cr.fluentbit.io/fluent/fluent-bit:3.0.2",
                                  volumeMounts=[{"name": "varlog", "mountPath": "/var/log"}])]}),
    daemonset("node-exporter", "monitoring", 83, {"app": "node-exporter"},
              {"containers": [ctr("node-exporter", "quay.io/prometheus/node-exporter:v1.7.0",
                                  args=["--path.rootfs=/host"])], "hostNetwork": True, "hostPID": True}),
    daemonset("netshoot", "debug", 84, {"app": "netshoot"},
              {"containers": [ctr("netshoot", "nicolaka/netshoot:v0.12", command=["sleep", "infinity"],
                                  securityContext={"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}})]}),
]

REPLICASET = {
    "kind": "ReplicaSet", "apiVersion": "apps/v1",
    "metadata": meta("web-5d8f7c9b6", "default", 90, labels={"app": "web", "pod-template-hash": "5d8f7c9b6"},
                     annotations={"deployment.kubernetes.io/desired-replicas": "2",
                                  "deployment.kubernetes.io/max-replicas": "3",
                                  "deployment.kubernetes.io/revision": "4"},
                     ownerReferences=[owner("apps/v1", "Deployment", "web", 91)], generation=1),
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d8f7c9b6"}},
             "template": {"metadata": {"creationTimestamp": None,
                                       "labels": {"app": "web", "pod-template-hash": "5d8f7c9b6"}},
                          "spec": {"containers": [ctr("web", "nginx:1.25")]}}},
    "status": {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
               "observedGeneration": 1},
}
DEPLOYMENT = {
    "kind": "Deployment", "apiVersion": "apps/v1",
    "metadata": meta("web", "default", 91, labels={"app": "web"},
                     annotations={"deployment.kubernetes.io/revision": "4"}, generation=4),
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
             "template": {"metadata": {"creationTimestamp": None, "labels": {"app": "web"}},
                          "spec": {"containers": [ctr("web", "nginx:1.25")]}},
             "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
             "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
    "status": {"observedGeneration": 4, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
               "availableReplicas": 2,
               "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": T0,
                               "lastTransitionTime": T0, "reason": "MinimumReplicasAvailable",
                               "message": "Deployment has minimum availability."}]},
}
JOB = {
    "kind": "Job", "apiVersion": "batch/v1",
    "metadata": meta("backup-28211400", "ops", 93, labels={"job-name": "backup-28211400"}, generation=1,
                     ownerReferences=[owner("batch/v1", "CronJob", "backup", 94)]),
    "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
             "suspend": False,
             "template": {"metadata": {"creationTimestamp": None, "labels": {"job-name": "backup-28211400"}},
                          "spec": {"containers": [ctr("backup", "busybox:1.36")], "restartPolicy": "OnFailure"}}},
    "status": {"startTime": "2024-04-12T09:20:00Z", "active": 1, "ready": 1, "uncountedTerminatedPods": {}},
}
CRONJOB = {
    "kind": "CronJob", "apiVersion": "batch/v1",
    "metadata": meta("backup", "ops", 94, generation=1),
    "spec": {"schedule": "0 * * * *", "concurrencyPolicy": "Forbid", "suspend": False,
             "jobTemplate": {"metadata": {"creationTimestamp": None},
                             "spec": {"template": {"metadata": {"creationTimestamp": None},
                                                   "spec": {"containers": [ctr("backup", "busybox:1.36")],
                                                            "restartPolicy": "OnFailure"}}}},
             "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1},
    "status": {"active": [{"kind": "Job", "namespace": "ops", "name": "backup-28211400", "uid": uid(93),
                           "apiVersion": "batch/v1", "resourceVersion": "1093"}],
               "lastScheduleTime": "2024-04-12T09:20:00Z"},
}

KUBE_PROXY_CONFIGMAP = {
    "kind": "ConfigMap", "apiVersion": "v1",
    "metadata": meta("kube-proxy", "kube-system", 95, labels={"app": "kube-proxy"},
                     annotations={"kubeadm.kubernetes.io/component-config.hash":
                                  "sha256:3f8a2f1c9e0d7b6a5c4e3d2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b"}),
    "data": {
        "config.conf": (
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nbindAddress: 0.0.0.0\nbindAddressHardFail: false\n"
            "clientConnection:\n  acceptContentTypes: \"\"\n  burst: 0\n  contentType: \"\"\n"
            "  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\n  qps: 0\nclusterCIDR: 10.244.0.0/16\n"
            "configSyncPeriod: 0s\nconntrack:\n  maxPerCore: null\n  min: null\n  tcpCloseWaitTimeout: null\n"
            "  tcpEstablishedTimeout: null\nenableProfiling: false\nhealthzBindAddress: \"\"\n"
            "hostnameOverride: \"\"\niptables:\n  localhostNodePorts: null\n  masqueradeAll: false\n"
            "  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nipvs:\n  excludeCIDRs: null\n"
            "  minSyncPeriod: 0s\n  scheduler: \"\"\n  strictARP: false\n  syncPeriod: 0s\n  tcpFinTimeout: 0s\n"
            "  tcpTimeout: 0s\n  udpTimeout: 0s\nkind: KubeProxyConfiguration\nmetricsBindAddress: \"\"\n"
            "mode: \"\"\nnodePortAddresses: null\noomScoreAdj: null\nportRange: \"\"\nshowHiddenMetricsForVersion: \"\"\n"
            "winkernel:\n  enableDSR: false\n  forwardHealthCheckVip: false\n  networkName: \"\"\n"
            "  rootHnsEndpointName: \"\"\n  sourceVip: \"\"\n"
        ),
        "kubeconfig.conf": (
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n"
            "    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt\n"
            "    server: https://10.0.1.10:6443\n  name: default\ncontexts:\n- context:\n    cluster: default\n"
            "    namespace: default\n    user: default\n  name: default\ncurrent-context: default\nusers:\n"
            "- name: default\n  user:\n    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n"
        ),
    },
}

LOG_CURRENT = """\
I0412 09:14:31.204512       1 server_others.go:72] "Using iptables proxy"
I0412 09:14:31.220115       1 server.go:1050] "Successfully retrieved node IP(s)" IPs=["10.0.1.17"]
I0412 09:14:31.223781       1 conntrack.go:58] "Setting nf_conntrack_max" nfConntrackMax=131072
I0412 09:14:31.247034       1 server.go:652] "kube-proxy running in dual-stack mode" primary ipFamily="IPv4"
I0412 09:14:31.271950       1 server_others.go:168] "Using iptables Proxier"
I0412 09:14:31.275113       1 proxier.go:240] "Setting route_localnet=1 to allow node-ports on localhost; to change this either disable iptables.localhostNodePorts (--iptables-localhost-nodeports) or set nodePortAddresses (--nodeport-addresses) to filter loopback addresses"
I0412 09:14:31.276002       1 server.go:865] "Version info" version="v1.29.3"
I0412 09:14:31.281404       1 config.go:188] "Starting service config controller"
I0412 09:14:31.281430       1 shared_informer.go:311] Waiting for caches to sync for service config
I0412 09:14:31.281455       1 config.go:97] "Starting endpoint slice config controller"
I0412 09:14:31.382171       1 shared_informer.go:318] Caches are synced for endpoint slice config
I0412 09:14:31.382190       1 shared_informer.go:318] Caches are synced for service config
"""
LOG_PREVIOUS = """\
I0412 08:58:41.010377       1 server_others.go:72] "Using iptables proxy"
I0412 08:58:41.119310       1 shared_informer.go:318] Caches are synced for service config
I0412 09:13:02.928771       1 proxier.go:1506] "Reloading service iptables data" numServices=9 numEndpoints=10 numFilterChains=6 numFilterRules=5 numNATChains=22 numNATRules=51
E0412 09:13:02.931291       1 proxier.go:1523] "Failed to execute iptables-restore" err=<
\texit status 2: iptables-restore v1.8.9 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory
\tError occurred at line: 47
\tTry `iptables-restore -h' or 'iptables-restore --help' for more information.
 >
I0412 09:13:02.931308       1 proxier.go:810] "Sync failed" retryingTime="30s"
E0412 09:13:05.112233       1 run.go:74] "command failed" err="failed to run Kubelet: context canceled"
"""

# -- Secrets the collector must never ask for ----------------------------------------------------------------

SECRET_VALUE = "PLANTED-SECRET-9f1c2d3e4b5a"
SECRET = {
    "kind": "Secret", "apiVersion": "v1",
    "metadata": meta("kube-proxy-token-x9z8w", "kube-system", 96,
                     annotations={"kubernetes.io/service-account.name": "kube-proxy",
                                  "kubernetes.io/service-account.uid": uid(97)}),
    "data": {"token": base64.b64encode(SECRET_VALUE.encode()).decode(),
             "namespace": base64.b64encode(b"kube-system").decode()},
    "type": "kubernetes.io/service-account-token",
}


# -- recordings ------------------------------------------------------------------------------------------


def lists(path: str, list_kind: str, api_version: str, objects: list[Obj], page_size: int, rv: int = 4711,
          query: dict[str, str] | None = None) -> list[Obj]:
    return list_exchanges(path, list_kind, api_version, objects, page_size=page_size, resource_version=rv,
                          query=query)


def node_by_name() -> list[Obj]:
    return [get_exchange(f"/api/v1/nodes/{NODE}", NODES[1])]


def services(rv: int = 4711) -> list[Obj]:
    return lists("/api/v1/services", "ServiceList", "v1", SERVICES, page_size=3, rv=rv)


def slices() -> list[Obj]:
    return lists("/apis/discovery.k8s.io/v1/endpointslices", "EndpointSliceList", "discovery.k8s.io/v1", SLICES,
                 page_size=4)


def endpoints() -> list[Obj]:
    return lists("/api/v1/endpoints", "EndpointsList", "v1", ENDPOINTS, page_size=500)


def rest(logs: bool = False) -> list[Obj]:
    """Pods, DaemonSets, the ConfigMap, the controllers (StatefulSet ``db`` is gone), the logs."""
    out = lists("/api/v1/pods", "PodList", "v1", PODS, page_size=500, query={"fieldSelector": f"spec.nodeName={NODE}"})
    out += lists("/apis/apps/v1/daemonsets", "DaemonSetList", "apps/v1", DAEMONSETS, page_size=500)
    out.append(get_exchange(object_path(KUBE_PROXY_CONFIGMAP), KUBE_PROXY_CONFIGMAP))
    out.append(get_exchange(object_path(DAEMONSETS[0]), DAEMONSETS[0]))
    out.append(get_exchange(object_path(DAEMONSETS[1]), DAEMONSETS[1]))
    out.append(get_exchange(object_path(REPLICASET), REPLICASET))
    out.append(get_exchange("/apis/apps/v1/namespaces/default/statefulsets/db",
                            not_found("statefulsets", "db", "apps"), status_code=404))
    out.append(get_exchange(object_path(JOB), JOB))
    out.append(get_exchange(object_path(DEPLOYMENT), DEPLOYMENT))
    out.append(get_exchange(object_path(CRONJOB), CRONJOB))
    if logs:
        path = "/api/v1/namespaces/kube-system/pods/kube-proxy-x7k2p/log"
        out.append(get_exchange(path, LOG_CURRENT, query=LOG_QUERY))
        out.append(get_exchange(path, LOG_PREVIOUS, query={**LOG_QUERY, "previous": "true"}))
    return out


def recordings() -> dict[str, list[Obj]]:
    rec: dict[str, list[Obj]] = {}
    rec["by-name"] = node_by_name() + services() + slices() + rest(logs=True)

    # The continue token of page 2 expired: 410 with a new (inconsistent) token; the list restarts.
    pages = services()
    token2 = pages[1]["request"]["query"]["continue"]
    restarted = services(rv=4789)
    # etcd3 compactedContinue: a new token from the same key, at resourceVersion -1 (inconsistent remainder)
    last_of_page1 = sorted(f"{s['metadata']['namespace']}/{s['metadata']['name']}" for s in SERVICES)[2]
    gone = get_exchange("/api/v1/services", expired(continue_token(-1, last_of_page1)), status_code=410,
                        query={"limit": "500", "continue": token2})
    rec["expired-continue"] = node_by_name() + pages[:1] + [gone] + restarted + slices() + rest()

    denied = forbidden(SA, "list", "endpointslices", "discovery.k8s.io")
    rec["forbidden-endpointslices"] = (
        node_by_name() + services()
        + [get_exchange("/apis/discovery.k8s.io/v1/endpointslices", denied, status_code=403, query={"limit": "500"})]
        + endpoints() + rest()
    )

    # a server older than EndpointSlices (1.16 and before): the group is not served at all
    old = [get_exchange("/apis/discovery.k8s.io", not_found_path(), status_code=404)]
    rec["old-cluster"] = node_by_name() + services() + old + endpoints() + rest()

    # --node not given, hostname "host17" is not a Node's name: found by the node's address 10.0.1.17.
    by_address = [get_exchange("/api/v1/nodes/host17", not_found("nodes", "host17"), status_code=404)]
    by_address += lists("/api/v1/nodes", "NodeList", "v1", NODES, page_size=2)
    rec["by-address"] = by_address + services() + slices() + rest()

    # The short hostname "worker-1": the Node is named by its FQDN.
    by_prefix = [get_exchange("/api/v1/nodes/worker-1", not_found("nodes", "worker-1"), status_code=404)]
    by_prefix += lists("/api/v1/nodes", "NodeList", "v1", NODES, page_size=2)
    rec["by-prefix"] = by_prefix + services() + slices() + rest()

    rec["unauthorized"] = [get_exchange(f"/api/v1/nodes/{NODE}", unauthorized(), status_code=401)]

    # A server that would hand out Secrets and tokens to anyone asking: nobody should ask.
    secret_list = {"kind": "SecretList", "apiVersion": "v1", "metadata": {"resourceVersion": "4711"},
                   "items": [{k: v for k, v in SECRET.items() if k not in ("kind", "apiVersion")}]}
    token_request = {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                     "metadata": {"name": "kube-proxy", "namespace": "kube-system", "creationTimestamp": None},
                     "spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"],
                              "expirationSeconds": 3600, "boundObjectRef": None},
                     "status": {"token": SECRET_VALUE + ".jwt", "expirationTimestamp": "2024-04-12T10:20:00Z"}}
    trap = [
        get_exchange("/api/v1/secrets", secret_list, query={"limit": "500"}, repeat=True),
        get_exchange("/api/v1/secrets", secret_list, repeat=True),
        get_exchange("/api/v1/namespaces/kube-system/secrets", secret_list, query={"limit": "500"}, repeat=True),
        get_exchange("/api/v1/namespaces/kube-system/secrets/kube-proxy-token-x9z8w", SECRET, repeat=True),
        {"request": {"method": "POST", "path": "/api/v1/namespaces/kube-system/serviceaccounts/kube-proxy/token",
                     "query": {}},
         "response": {"status": 201, "body": token_request}, "repeat": True},
    ]
    rec["with-secrets"] = rec["by-name"] + trap

    # A server that answers the Node, then hangs on the Services list.
    hang = copy.deepcopy(services()[0])
    hang["response"]["delay"] = 30
    rec["hanging-services"] = [*node_by_name(), hang]
    return rec


def main() -> None:
    for name, exchanges in recordings().items():
        (HERE / f"{name}.json").write_text(json.dumps(exchanges, indent=1) + "\n", encoding="utf-8")
        print(f"{name}.json: {len(exchanges)} exchanges")


if __name__ == "__main__":
    main()

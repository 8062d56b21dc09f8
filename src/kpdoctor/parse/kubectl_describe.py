"""``kubectl describe service`` and ``kubectl describe node``: read into partial Service (and
Endpoints) and Node objects.

The commonest paste of a Service that does not answer. kubectl's describer
(pkg/describe/describe.go, ``describeService``; the same fields since 1.0, a few added) writes,
through a tab writer that pads every key to one column:

    Name:              redis-example
    Namespace:         default
    Labels:            k=v              (more labels on the following lines, indented; <none>)
    Annotations:       k: v             (likewise)
    Selector:          k=v,k=v          (<none>)
    Type:              ClusterIP
    IP Family Policy:  SingleStack      (1.20 on)
    IP Families:       IPv4             (1.20 on)
    IP:                10.101.33.59     (spec.clusterIP; "None" when headless)
    IPs:               10.101.33.59     (1.20 on: spec.clusterIPs)
    External IPs:      a,b
    IP: / LoadBalancer IP: / Desired LoadBalancer IP:   spec.loadBalancerIP (not what kube-proxy programs)
    External Name:     host
    LoadBalancer Ingress:  ip[ (VIP|Proxy)], hostname, ...
    Port:              <name or <unset>>  6379/TCP      (then, per port:)
    TargetPort:        9121/TCP
    AppProtocol:       ...
    NodePort:          <name>  31597/TCP
    Endpoints:         ip:port,ip:port[ + N more...]    (<none>; only ready endpoints; at most 3)
    Session Affinity:  None | ClientIP
    External Traffic Policy:  Cluster | Local
    Internal Traffic Policy:  Cluster | Local
    HealthCheck NodePort:     N
    LoadBalancer Source Ranges:  a,b
    Traffic Distribution:     PreferClose
    Events:            <none>           (or a table of events)

What a describe does not show is unknown, not unset: the Service is a partial object (its
``fragment`` says so), never taken to list every Service. Its endpoints are known only when
every port's ``Endpoints:`` line lists them all (no ``+ N more``, not ``<none>``: that hides
serving endpoints kube-proxy may fall back to), and no traffic policy, topology or zone decides
which of them a node uses (a describe shows no endpoint's node or zone): then they are an
Endpoints object of their own, with the ports the lines name.

A Node's description (``describeNode``) gives its labels, whether it is unschedulable, its
conditions (a table under ``Conditions:``, each row's type and status first), its addresses
(``InternalIP:``, ``ExternalIP:``, ``Hostname:`` under ``Addresses:``), its pod CIDRs and the
``System Info:`` kubelet reports (``Kernel Version``, ``OS Image``, ``Container Runtime
Version``, ``Kubelet Version``, and until 1.31 ``Kube-Proxy Version``).

A Pod's description (``describePod``, ``describeContainers``) gives its node (``Node:
NAME/HOSTIP``), phase (``Status:``) and labels, and per container under ``Containers:`` (a
``name:`` line, then its fields) its image, command and arguments (the lines under ``Command:``
and ``Args:``), its state now (``State: Running|Waiting|Terminated`` and the ``Reason:`` under
it), the last run's end (``Last State: Terminated``, its ``Reason:`` and ``Exit Code:``),
``Ready:`` and ``Restart Count:``; kubectl 1.20 here prints exactly these. The Pod is a partial
object like the others (its volumes and mounts are not read: never taken to lack one).
Nothing here raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kpdoctor import lazy_re
from kpdoctor.parse.k8s import K8sObject, Objects
from kpdoctor.parse.kubectl_table import MORE, NONE, listed

DESCRIBED = "a `kubectl describe` output"

# a field line: the key as kubectl names it, the tab writer's padding (or a tab), the value
_FIELD = lazy_re.compile(r"^(?P<key>[A-Z][A-Za-z-]*(?: [A-Za-z-]+)*):(?:[ \t]+(?P<value>.*?))?[ \t]*$")
_PORT = lazy_re.compile(r"^(?P<name>\S+)[ \t]+(?P<port>\d{1,5})/(?P<proto>[A-Za-z]+)$")
_TARGET = lazy_re.compile(r"^(?P<port>[^/\s]+)/(?P<proto>[A-Za-z]+)$")
_ENDPOINT = lazy_re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<v4>[0-9.]+)):(?P<port>\d{1,5})$")
_LABEL = lazy_re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*=\S*$")
_ANNOTATION = lazy_re.compile(r"^(?P<key>[A-Za-z0-9][A-Za-z0-9._/-]*):[ \t]*(?P<value>.*)$")

# The fields of a Service's description; a line with another key (an annotation's continuation,
# an event) is not one of them.
_KEYS = frozenset(
    [
        "Name",
        "Namespace",
        "Labels",
        "Annotations",
        "Selector",
        "Type",
        "IP Family Policy",
        "IP Families",
        "IP",
        "IPs",
        "External IPs",
        "LoadBalancer IP",
        "Desired LoadBalancer IP",
        "External Name",
        "LoadBalancer Ingress",
        "Port",
        "TargetPort",
        "AppProtocol",
        "NodePort",
        "Endpoints",
        "Session Affinity",
        "External Traffic Policy",
        "Internal Traffic Policy",
        "HealthCheck NodePort",
        "LoadBalancer Source Ranges",
        "Traffic Distribution",
        "Events",
        # a Node's
        "Roles",
        "CreationTimestamp",
        "Taints",
        "Unschedulable",
        "Lease",
        "Conditions",
        "Addresses",
        "Capacity",
        "Allocatable",
        "System Info",
        "PodCIDR",
        "PodCIDRs",
        "ProviderID",
        "Non-terminated Pods",
        "Allocated resources",
    ]
)
# `System Info:`'s fields, as kubelet reports them (status.nodeInfo)
_NODE_INFO = {
    "Kernel Version": "kernelVersion",
    "OS Image": "osImage",
    "Operating System": "operatingSystem",
    "Architecture": "architecture",
    "Container Runtime Version": "containerRuntimeVersion",
    "Kubelet Version": "kubeletVersion",
    "Kube-Proxy Version": "kubeProxyVersion",
}
_ADDRESS_TYPES = ("InternalIP", "ExternalIP", "Hostname", "InternalDNS", "ExternalDNS")
# what tells a Node's description from another object's
_NODE_KEYS = frozenset(["Roles", "System Info", "Addresses"])
# what tells a Service's description from another object's (a Pod's has no Session Affinity)
_SERVICE_KEYS = frozenset(["Session Affinity", "Port", "TargetPort", "Endpoints"])


@dataclass(slots=True)
class _Port:
    name: str
    port: int
    protocol: str
    target: str | None = None
    node_port: int | None = None
    endpoints: str | None = None  # the Endpoints line's value, as printed


@dataclass(slots=True)
class _Described:
    line: int  # of its Name line, 0-based in the text
    fields: dict[str, str] = field(default_factory=dict)
    ips: list[str] = field(default_factory=list)  # every IP: line, in order
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    ports: list[_Port] = field(default_factory=list)
    # a Node's
    conditions: list[tuple[str, str]] = field(default_factory=list)  # (type, status)
    addresses: list[tuple[str, str]] = field(default_factory=list)  # (type, address)
    info: dict[str, str] = field(default_factory=dict)  # status.nodeInfo's fields

    @property
    def kind(self) -> str | None:
        keys = set(self.fields) | ({"Port"} if self.ports else set())
        if {"Namespace", "Type"} <= keys and _SERVICE_KEYS & keys:
            return "Service"
        if "Namespace" not in keys and len(_NODE_KEYS & keys) >= 2:
            return "Node"
        return None


def _blocks(text: str) -> list[_Described]:
    out: list[_Described] = []
    cur: _Described | None = None
    section = ""  # the field whose continuation lines run (Labels, Annotations, a Node's tables)
    for i, raw in enumerate(text.splitlines()):
        line = raw.strip()
        m = _FIELD.match(line)
        key = m.group("key") if m is not None and m.group("key") in _KEYS else None
        if cur is not None and section in ("Addresses", "System Info") and m is not None:
            # a Node's nested fields: `InternalIP:  10.0.0.1`, `Kernel Version:  5.15.0`
            value = (m.group("value") or "").strip()
            if section == "Addresses" and m.group("key") in _ADDRESS_TYPES and value:
                cur.addresses.append((m.group("key"), value))
                continue
            if section == "System Info" and m.group("key") in _NODE_INFO:
                cur.info[_NODE_INFO[m.group("key")]] = value
                continue
        if key is None:
            if cur is not None and section == "Labels" and _LABEL.match(line):
                k, _, v = line.partition("=")
                cur.labels[k] = v
            elif cur is not None and section == "Annotations" and (a := _ANNOTATION.match(line)):
                cur.annotations[a.group("key")] = a.group("value")
            elif cur is not None and section == "Conditions" and line and not line.startswith(("Type", "----")):
                words = line.split()
                if len(words) >= 2 and words[1] in ("True", "False", "Unknown"):
                    cur.conditions.append((words[0], words[1]))
            elif section not in ("Conditions", "Addresses", "System Info"):
                section = ""
            continue
        assert m is not None
        value = (m.group("value") or "").strip()
        if key == "Name":
            cur = _Described(i)
            out.append(cur)
        if cur is None:
            continue
        section = key if key in ("Labels", "Annotations", "Conditions", "Addresses", "System Info") else ""
        if key == "Labels" and _LABEL.match(value):
            k, _, v = value.partition("=")
            cur.labels[k] = v
        elif key == "Annotations" and (a := _ANNOTATION.match(value)):
            cur.annotations[a.group("key")] = a.group("value")
        elif key == "IP":
            cur.ips.append(value)
        elif key == "Port":
            p = _PORT.match(value)
            if p is not None:
                name = "" if p.group("name") in NONE else p.group("name")
                cur.ports.append(_Port(name, int(p.group("port")), p.group("proto").upper()))
        elif key in ("TargetPort", "NodePort", "Endpoints") and cur.ports:
            port = cur.ports[-1]
            if key == "TargetPort":
                t = _TARGET.match(value)
                port.target = t.group("port") if t is not None else None
            elif key == "NodePort":
                n = _PORT.match(value)
                port.node_port = int(n.group("port")) if n is not None else None
            else:
                port.endpoints = value
        else:
            cur.fields.setdefault(key, value)
    return [b for b in out if b.kind is not None]


def is_description(lines: list[str]) -> bool:
    """Does this text hold a ``kubectl describe service`` (its Name, Namespace, Type and a
    Service's own fields), ``kubectl describe node`` (Name and two of Roles, Addresses and
    System Info) or ``kubectl describe pod`` (Name, Namespace, Containers and a container)?"""
    text = "\n".join(lines)
    return bool(_blocks(text)) or bool(_described_pods(text))


def _service(b: _Described) -> dict[str, Any]:
    f = b.fields
    spec: dict[str, Any] = {}
    kind = f.get("Type", "")
    if kind:
        spec["type"] = kind
    selector = listed(f.get("Selector"))
    if selector:
        spec["selector"] = dict(s.partition("=")[::2] for s in selector)
    # the first IP line is spec.clusterIP; a later one (1.20's) is spec.loadBalancerIP
    if b.ips and b.ips[0] not in NONE:
        spec["clusterIP"] = b.ips[0]
    cluster_ips = listed(f.get("IPs"))
    if cluster_ips:
        spec["clusterIPs"] = cluster_ips
    families = listed(f.get("IP Families"))
    if families:
        spec["ipFamilies"] = families
    external = listed(f.get("External IPs"))
    if external:
        spec["externalIPs"] = external
    if f.get("External Name"):
        spec["externalName"] = f["External Name"]
    ports: list[dict[str, Any]] = []
    for p in b.ports:
        port: dict[str, Any] = {"port": p.port, "protocol": p.protocol}
        if p.name:
            port["name"] = p.name
        if p.target is not None:
            port["targetPort"] = int(p.target) if p.target.isdigit() else p.target
        if p.node_port is not None:
            port["nodePort"] = p.node_port
        ports.append(port)
    spec["ports"] = ports
    for key, name in (
        ("Session Affinity", "sessionAffinity"),
        ("External Traffic Policy", "externalTrafficPolicy"),
        ("Internal Traffic Policy", "internalTrafficPolicy"),
        ("Traffic Distribution", "trafficDistribution"),
    ):
        if f.get(key) and f[key] not in NONE:
            spec[name] = f[key]
    if f.get("HealthCheck NodePort", "").isdigit():
        spec["healthCheckNodePort"] = int(f["HealthCheck NodePort"])
    ranges = listed(f.get("LoadBalancer Source Ranges"))
    if ranges:
        spec["loadBalancerSourceRanges"] = ranges
    meta: dict[str, Any] = {"name": f.get("Name", ""), "namespace": f.get("Namespace", "")}
    if b.labels:
        meta["labels"] = dict(b.labels)
    if b.annotations:
        meta["annotations"] = dict(b.annotations)
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}
    ingress = []
    for entry in listed(f.get("LoadBalancer Ingress")):
        value, _, mode = entry.partition(" (")
        if value.replace(".", "").isdigit() or ":" in value:
            ingress.append({"ip": value, **({"ipMode": mode.rstrip(")")} if mode else {})})
        else:
            ingress.append({"hostname": value})
    if ingress:
        body["status"] = {"loadBalancer": {"ingress": ingress}}
    return body


def _endpoints(b: _Described, service: dict[str, Any]) -> dict[str, Any] | None:
    """The Service's ready endpoints as a v1 Endpoints object, when the description shows every
    one of every port and nothing but readiness decides which a node uses (module docstring)."""
    spec = service["spec"]
    if not b.ports or spec.get("clusterIP") in (None, "None"):
        return None
    if "Local" in (spec.get("externalTrafficPolicy"), spec.get("internalTrafficPolicy")):
        return None
    if spec.get("trafficDistribution") or any("topology" in k for k in b.annotations):
        return None
    subsets = []
    for p in b.ports:
        value = p.endpoints
        if value is None or value in NONE or MORE.search(value):
            return None
        addresses = []
        numbers = set()
        for ep in listed(value):
            m = _ENDPOINT.match(ep)
            if m is None:
                return None
            addresses.append({"ip": m.group("v6") or m.group("v4")})
            numbers.add(int(m.group("port")))
        if len(numbers) != 1:  # one subset per target port: a named port on Pods that differ
            return None
        port = {"port": numbers.pop(), "protocol": p.protocol, **({"name": p.name} if p.name else {})}
        subsets.append({"addresses": addresses, "ports": [port]})
    meta = {"name": service["metadata"]["name"], "namespace": service["metadata"]["namespace"]}
    return {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta, "subsets": subsets}


def _node(b: _Described) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if b.addresses:
        status["addresses"] = [{"type": t, "address": a} for t, a in b.addresses]
    info = {k: v for k, v in b.info.items() if v and v not in NONE}
    if info:
        status["nodeInfo"] = info
    if b.conditions:
        status["conditions"] = [{"type": t, "status": v} for t, v in b.conditions]
    spec: dict[str, Any] = {}
    if b.fields.get("Unschedulable") in ("true", "false"):
        spec["unschedulable"] = b.fields["Unschedulable"] == "true"
    cidrs = listed(b.fields.get("PodCIDRs")) or listed(b.fields.get("PodCIDR"))
    if cidrs:
        spec["podCIDR"], spec["podCIDRs"] = cidrs[0], cidrs
    meta: dict[str, Any] = {"name": b.fields.get("Name", "")}
    if b.labels:
        meta["labels"] = dict(b.labels)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec, "status": status}


# The fields of a Pod's description that end its Containers: section.
_POD_AFTER_CONTAINERS = frozenset(
    {"Init Containers", "Conditions", "Readiness Gates", "Volumes", "QoS Class", "Node-Selectors", "Tolerations"}
    | {"Events"}
)
_CONTAINER_NAME = lazy_re.compile(r"^(?P<name>[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?):$")
_STATES = {"Running": "running", "Waiting": "waiting", "Terminated": "terminated"}


def _container_status(c: dict[str, Any], fields: dict[str, str], last: dict[str, str]) -> dict[str, Any]:
    status: dict[str, Any] = {"name": c["name"]}
    if "image" in c:
        status["image"] = c["image"]
    state = _STATES.get(fields.get("State", "").split(" ")[0])
    if state is not None:
        status["state"] = {state: {"reason": fields["Reason"]} if "Reason" in fields and state != "running" else {}}
    if _STATES.get(last.get("State", "").split(" ")[0]) == "terminated":
        ended: dict[str, Any] = {k: last[v] for k, v in (("reason", "Reason"), ("finishedAt", "Finished")) if v in last}
        if last.get("Exit Code", "").lstrip("-").isdigit():
            ended["exitCode"] = int(last["Exit Code"])
        status["lastState"] = {"terminated": ended}
    if fields.get("Ready") in ("True", "False"):
        status["ready"] = fields["Ready"] == "True"
    if fields.get("Restart Count", "").isdigit():
        status["restartCount"] = int(fields["Restart Count"])
    return status


def _described_pods(text: str) -> list[tuple[int, dict[str, Any]]]:
    """Each Pod's description as (its Name line, 0-based; a partial Pod object)."""
    out: list[tuple[int, dict[str, Any]]] = []
    pod: dict[str, str] = {}
    labels: dict[str, str] = {}
    containers: list[dict[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    start = -1
    mode = ""  # "containers" while in that section; "args" under a container's Command:/Args:
    fields: dict[str, str] = {}
    last: dict[str, str] = {}
    sub: dict[str, str] = fields  # where Reason: / Exit Code: go (under State: or Last State:)

    def close_container() -> None:
        if containers and len(statuses) < len(containers):
            statuses.append(_container_status(containers[-1], fields, last))

    def close_pod() -> None:
        close_container()
        if start >= 0 and "Namespace" in pod and containers and ("Node" in pod or "Status" in pod):
            meta: dict[str, Any] = {"name": pod.get("Name", ""), "namespace": pod["Namespace"]}
            if labels:
                meta["labels"] = dict(labels)
            spec: dict[str, Any] = {"containers": containers}
            node = pod.get("Node", "").split("/", 1)[0]
            if node and node not in NONE:
                spec["nodeName"] = node
            status: dict[str, Any] = {"containerStatuses": statuses}
            if pod.get("Status"):
                status["phase"] = pod["Status"]
            out.append((start, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}))

    section = ""
    for i, raw in enumerate(text.splitlines()):
        line = raw.strip()
        m = _FIELD.match(line)
        key, value = (m.group("key"), (m.group("value") or "").strip()) if m is not None else ("", "")
        if key == "Name" and not raw[:1].isspace():  # (a volume's Name: is indented under it)
            close_pod()
            pod, labels, containers, statuses, start, mode, section = {"Name": value}, {}, [], [], i, "", ""
            continue
        if start < 0:
            continue
        if mode in ("containers", "args"):
            if key in _POD_AFTER_CONTAINERS:
                close_container()
                mode = ""
            elif (c := _CONTAINER_NAME.match(line)) is not None and not key:
                close_container()
                containers.append({"name": c.group("name")})
                fields, last, mode = {}, {}, "containers"
                sub = fields
                continue
            elif not containers:
                continue
            elif mode == "args" and not key and line:
                containers[-1].setdefault(section, []).append(line)
                continue
            elif key:
                mode = "containers"
                if key in ("Command", "Args"):
                    section, mode = key.lower(), "args"
                    if value:
                        containers[-1].setdefault(section, []).append(value)
                elif key == "Image":
                    containers[-1]["image"] = value
                elif key == "State":
                    sub = fields
                    fields["State"] = value
                elif key == "Last State":
                    sub = last
                    last["State"] = value
                elif key in ("Reason", "Exit Code", "Started", "Finished", "Message", "Signal"):
                    sub.setdefault(key, value)
                elif key in ("Ready", "Restart Count"):
                    sub = fields
                    fields[key] = value
                continue
        if key == "Containers":
            mode = "containers"
        elif key == "Labels":
            section = "Labels"
            if _LABEL.match(value):
                k, _, v = value.partition("=")
                labels[k] = v
        elif key:
            section = ""
            pod.setdefault(key, value)
        elif section == "Labels" and _LABEL.match(line):
            k, _, v = line.partition("=")
            labels[k] = v
    close_pod()
    return out


def described_objects(text: str, artifact: str, first_line: int = 1) -> Objects:
    """The Services and Nodes of ``text``'s descriptions as partial objects (``fragment``
    DESCRIBED), cited at their Name line, each Service with its Endpoints when the description
    shows them all."""
    out = Objects()
    for b in _blocks(text):
        if b.kind == "Node":
            body = _node(b)
            name = body["metadata"]["name"]
            out.items.append(K8sObject("Node", "v1", None, name, body, artifact, first_line + b.line, DESCRIBED))
            continue
        body = _service(b)
        meta = body["metadata"]
        name, ns = meta["name"], meta["namespace"] or None
        line = first_line + b.line
        out.items.append(K8sObject("Service", "v1", ns, name, body, artifact, line, DESCRIBED))
        eps = _endpoints(b, body)
        if eps is not None:
            out.items.append(K8sObject("Endpoints", "v1", ns, name, eps, artifact, line, DESCRIBED))
    for at, pod in _described_pods(text):
        meta = pod["metadata"]
        ns, name = meta["namespace"], meta["name"]
        out.items.append(K8sObject("Pod", "v1", ns, name, pod, artifact, first_line + at, DESCRIBED))
    return out

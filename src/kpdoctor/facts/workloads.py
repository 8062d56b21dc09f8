"""Workloads that serve Services: the Pods whose termination can drop Service connections.

A Deployment, StatefulSet or DaemonSet is named once (not each of its Pods); a Pod is named on
its own only when no controller of it is in the evidence. A workload serves a Service when the
Service's selector matches its Pod template's labels in the same namespace. When the evidence
holds no Service at all, which Services a workload backs is unknown: workloads that look like
servers (a container port, a readiness probe or a preStop hook) are taken as serving, marked
``assumed`` so the checks lower their confidence and say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kpdoctor.model import Cite
from kpdoctor.parse.k8s import K8sObject

if TYPE_CHECKING:
    from kpdoctor.facts import Facts

CONTROLLERS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


@dataclass(frozen=True, slots=True)
class Served:
    """A workload and the Services it backs."""

    obj: K8sObject
    services: tuple[str, ...]  # ns/name
    assumed: bool = False  # no Service in the evidence: taken as serving because it looks like a server

    @property
    def ref(self) -> str:
        return self.obj.ref

    @property
    def serves(self) -> str:
        """For summaries: ``serves ns/a, ns/b`` or why it is taken to serve."""
        if self.assumed:
            return "no Service object given; it looks like a server"
        return "serves " + ", ".join(self.services)

    @property
    def cite(self) -> Cite:
        return Cite(self.obj.artifact, self.obj.line, f"{self.obj.ref} ({self.serves})")

    @property
    def pod_spec(self) -> dict[str, object]:
        spec = self.obj.body.get("spec") or {}
        if self.obj.kind != "Pod":
            spec = (spec.get("template") or {}).get("spec") or {}
        return spec if isinstance(spec, dict) else {}

    def containers(self) -> list[dict[str, Any]]:
        got = self.pod_spec.get("containers")
        return [c for c in got if isinstance(c, dict)] if isinstance(got, list) else []


def is_fragment(obj: K8sObject) -> bool:
    """A spec pasted in part: no ``apiVersion`` or no ``metadata.name``, and nothing that only
    the API writes (uid, resourceVersion, creationTimestamp: items of a typed List lack their own
    apiVersion but are whole). A key absent from a fragment is unknown, not unset: a fragment
    without ``volumes:`` does not prove a Pod mounts nothing."""
    meta = obj.body.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    if any(meta.get(k) for k in ("uid", "resourceVersion", "creationTimestamp")):
        return False
    return not obj.body.get("apiVersion") or not meta.get("name")


def _labels(obj: K8sObject) -> dict[str, str]:
    meta = obj.body.get("metadata") or {}
    if obj.kind != "Pod":
        meta = ((obj.body.get("spec") or {}).get("template") or {}).get("metadata") or {}
    labels = meta.get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def looks_like_server(obj: K8sObject) -> bool:
    """A container declares a port, a readiness probe or a preStop hook: it serves connections.
    hostNetwork Pods are node agents (CNI, kube-proxy, exporters) unless a Service says otherwise."""
    spec = obj.body.get("spec") or {}
    if obj.kind != "Pod":
        spec = (spec.get("template") or {}).get("spec") or {}
    if not isinstance(spec, dict) or spec.get("hostNetwork"):
        return False
    containers = spec.get("containers")
    for c in containers if isinstance(containers, list) else []:
        if not isinstance(c, dict):
            continue
        lifecycle = c.get("lifecycle")
        if c.get("ports") or c.get("readinessProbe") or (isinstance(lifecycle, dict) and lifecycle.get("preStop")):
            return True
    return False


def served_workloads(facts: Facts) -> list[Served]:
    """Workloads behind the Services given; without any Service, those that look like servers
    (``assumed``). kube-proxy's own DaemonSet and Pods, and Jobs, never count."""
    from kpdoctor.facts import is_kube_proxy_workload  # facts imports this module's users

    if not facts.objects.of("Service"):
        controllers = [o for kind in CONTROLLERS for o in facts.objects.of(kind)]
        out_assumed: list[Served] = []
        for obj in controllers + facts.objects.of("Pod"):
            if obj.kind == "Job" or is_kube_proxy_workload(obj):
                continue
            if obj.kind == "ReplicaSet" and _owned(obj, controllers):
                continue
            if obj.kind == "Pod" and (_owned(obj, controllers) or _matched_by_controller(obj, controllers)):
                continue
            if looks_like_server(obj):
                out_assumed.append(Served(obj, (), assumed=True))
        return out_assumed
    services = []
    for svc in facts.objects.of("Service"):
        sel = (svc.body.get("spec") or {}).get("selector")
        if isinstance(sel, dict) and sel:
            ns = svc.namespace or "default"
            services.append((ns, {str(k): str(v) for k, v in sel.items()}, f"{ns}/{svc.name}"))
    if not services:
        return []
    controllers = [o for kind in CONTROLLERS for o in facts.objects.of(kind)]
    out: list[Served] = []
    for obj in controllers + facts.objects.of("Pod"):
        if obj.kind == "ReplicaSet" and _owned(obj, controllers):
            continue
        if obj.kind == "Pod" and (_owned(obj, controllers) or _matched_by_controller(obj, controllers)):
            continue
        ns, labels = obj.namespace or "default", _labels(obj)
        backs = tuple(
            ref for sns, sel, ref in services if sns == ns and all(labels.get(k) == v for k, v in sel.items())
        )
        if backs:
            out.append(Served(obj, backs))
    return out


def _owned(obj: K8sObject, controllers: list[K8sObject]) -> bool:
    owners = (obj.body.get("metadata") or {}).get("ownerReferences") or []
    names = {(str(o.get("kind")), str(o.get("name"))) for o in owners if isinstance(o, dict)}
    ns = obj.namespace
    for c in controllers:
        if c.namespace != ns:
            continue
        if (c.kind, c.name) in names:
            return True
        # a Pod owned by a ReplicaSet of a Deployment that is in the evidence
        if c.kind == "Deployment" and any(k == "ReplicaSet" and n.startswith(f"{c.name}-") for k, n in names):
            return True
    return False


def _matched_by_controller(pod: K8sObject, controllers: list[K8sObject]) -> bool:
    labels = _labels(pod)
    for c in controllers:
        if c.namespace != pod.namespace:
            continue
        sel = ((c.body.get("spec") or {}).get("selector") or {}).get("matchLabels")
        if isinstance(sel, dict) and sel and all(labels.get(str(k)) == str(v) for k, v in sel.items()):
            return True
    return False

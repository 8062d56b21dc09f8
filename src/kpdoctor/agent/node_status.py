"""What the agent writes to the cluster, and all it writes: Events on its Node and one Node
condition. Nothing else in the cluster is ever changed.

* **Events**: one ``Warning`` when a finding appears (reason: its cause in CamelCase), one
  ``Normal`` ``...Resolved`` when it is gone. The same reason and message again within
  ``dedupe_seconds`` raises the existing Event's ``count`` instead of adding one (as the
  kubelet's event recorder does), and a token bucket (``burst`` Events, one more every
  ``refill_seconds``) keeps a flapping node from flooding the API; what it holds back is counted.
* **The condition** (default ``KubeProxyProblem``) in node-problem-detector's polarity: ``True``
  while a problem is found, reason the top cause in CamelCase, ``False`` when none is; its
  ``lastTransitionTime`` moves only when the status does. It is written when it changes and at
  least every ``heartbeat_seconds``.

A write that fails (the apiserver away, RBAC allowing only part of it) is counted and said in
the agent's status; the next cycle tries again. Nothing here ever raises into the cycle, nor
holds it: each write has an overall deadline (:data:`WRITE_SECONDS`, collect.kubeapi.fetch),
the writes of one cycle share the time :meth:`NodeReporter.begin` gives them, and after a write
the API server did not answer the cycle's other writes are not tried.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from kpdoctor.agent.counters import TokenBucket
from kpdoctor.collect.kubeapi import Unanswered, bounded_connections, fetch
from kpdoctor.model import Finding

log = logging.getLogger("kpdoctor.agent")

DEFAULT_CONDITION = "KubeProxyProblem"
HEALTHY_REASON = "KubeProxyHealthy"
MESSAGE_MAX = 1024
COMPONENT = "kpdoctor"
WRITE_SECONDS = 10.0  # one write, answered whole
ANSWER_BYTES = 1024 * 1024  # of a write's answer (the object written)


def camel(slug: str) -> str:
    """``iptables-backend-mismatch`` -> ``IptablesBackendMismatch`` (an Event or condition reason)."""
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^A-Za-z0-9]+", slug) if p)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clip(text: str, limit: int = MESSAGE_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class Condition:
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str


def condition_for(findings: list[Finding], inconclusive: str | None = None) -> Condition:
    """The condition the findings give: the first (the root cause, ranked) names it."""
    if findings:
        top = findings[0]
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        return Condition("True", camel(top.cause), _clip(f"{top.code} {top.summary}{more}"))
    if inconclusive:
        return Condition("Unknown", "KpdoctorInconclusive", _clip(inconclusive))
    return Condition("False", HEALTHY_REASON, "kpdoctor found no kube-proxy problem on this node")


@dataclass
class _Sent:
    name: str
    namespace: str
    count: int
    at: float


@dataclass
class WriteStats:
    events: Counter[str] = field(default_factory=Counter)  # Warning / Normal / aggregated
    dropped: int = 0  # held back by the rate limit
    errors: Counter[str] = field(default_factory=Counter)  # what -> failures
    last_error: str = ""
    condition_writes: int = 0


class NodeReporter:
    """Events and the Node condition for one node (see the module docstring)."""

    def __init__(
        self,
        api_client: Any,
        node: str,
        *,
        condition_type: str = DEFAULT_CONDITION,
        namespace: str = "default",
        burst: int = 25,
        refill_seconds: float = 300.0,
        dedupe_seconds: float = 600.0,
        heartbeat_seconds: float = 600.0,
        events: bool = True,
        condition: bool = True,
    ) -> None:
        from kubernetes import client as k8s

        self.core: Any = k8s.CoreV1Api(bounded_connections(api_client))
        self.node = node
        self.condition_type = condition_type
        self.namespace = namespace
        self.events_on = events
        self.condition_on = condition
        self.bucket = TokenBucket(rate=1.0 / refill_seconds, burst=float(burst))
        self._bucket_at: float | None = None
        self.dedupe_seconds = dedupe_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self._sent: dict[tuple[str, str], _Sent] = {}
        self._condition: Condition | None = None
        self._condition_at = 0.0
        self._transition: str | None = None
        self.stats = WriteStats()
        self.until: float | None = None  # the writes of this cycle end by then (monotonic)

    def begin(self, seconds: float) -> None:
        """The writes that follow (one cycle's) have ``seconds`` in all."""
        self.until = time.monotonic() + seconds

    def _write(self, what: str, fn: Any, *args: Any) -> bytes | None:
        """``fn(*args)`` within its deadline; None (counted, said) when it failed or was not tried."""
        left = WRITE_SECONDS if self.until is None else min(WRITE_SECONDS, self.until - time.monotonic())
        if left <= 0.05:
            self._failed(what, "not tried: the cycle's time for writes is spent (the API server did not answer)")
            return None
        try:
            return fetch(fn, *args, seconds=left, max_bytes=ANSWER_BYTES)
        except Exception as e:
            if isinstance(e, (Unanswered, urllib3.exceptions.HTTPError, OSError)):
                self.until = time.monotonic()  # the API server is not answering: no more writes this cycle
            self._failed(what, e)
            return None

    # -- events ------------------------------------------------------------------------------
    def event(self, kind: str, reason: str, message: str, node_uid: str | None) -> None:
        """One Event on the Node (``kind``: Warning or Normal), deduplicated and rate-limited."""
        if not self.events_on:
            return
        message = _clip(message)
        now = time.monotonic()
        key = (reason, message)
        sent = self._sent.get(key)
        if sent is not None and now - sent.at < self.dedupe_seconds:
            self._patch_count(sent, now)
            return
        spent = self.bucket.spend(1.0, 0.0 if self._bucket_at is None else now - self._bucket_at)
        self._bucket_at = now
        if spent:
            self.stats.dropped += 1
            return
        stamp = _now()
        body = {
            "metadata": {"generateName": f"{self.node}.", "namespace": self.namespace},
            "involvedObject": {"kind": "Node", "name": self.node, "uid": node_uid or self.node, "apiVersion": "v1"},
            "reason": reason,
            "message": message,
            "type": kind,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.node,
        }
        data = self._write("create event", self.core.create_namespaced_event, self.namespace, body)
        if data is None:
            return
        try:
            created = json.loads(data)
            name = str((created.get("metadata") or {}).get("name") or "")
        except (ValueError, AttributeError) as e:
            self._failed("create event", e)
            return
        self.stats.events[kind] += 1
        if len(self._sent) > 1000:
            self._sent = {k: v for k, v in self._sent.items() if now - v.at < self.dedupe_seconds}
        self._sent[key] = _Sent(name, self.namespace, 1, now)

    def _patch_count(self, sent: _Sent, now: float) -> None:
        sent.count += 1
        sent.at = now
        patch = {"count": sent.count, "lastTimestamp": _now()}
        if self._write("patch event", self.core.patch_namespaced_event, sent.name, sent.namespace, patch) is not None:
            self.stats.events["aggregated"] += 1

    # -- the condition -----------------------------------------------------------------------
    def condition(self, cond: Condition, node_obj: dict[str, Any] | None) -> None:
        """Set the Node condition when it changed (or its heartbeat is due)."""
        if not self.condition_on:
            return
        now = time.monotonic()
        same = self._condition == cond
        if same and now - self._condition_at < self.heartbeat_seconds:
            return
        stamp = _now()
        if self._transition is None and node_obj is not None:
            for c in (node_obj.get("status") or {}).get("conditions") or []:
                if isinstance(c, dict) and c.get("type") == self.condition_type and c.get("status") == cond.status:
                    self._transition = c.get("lastTransitionTime")
        flipped = self._condition is not None and self._condition.status != cond.status
        if flipped or (self._condition is None and not self._transition):
            self._transition = stamp
        body = {
            "status": {
                "conditions": [
                    {
                        "type": self.condition_type,
                        "status": cond.status,
                        "reason": cond.reason,
                        "message": cond.message,
                        "lastHeartbeatTime": stamp,
                        "lastTransitionTime": self._transition or stamp,
                    }
                ]
            }
        }
        if self._write("patch node status", self.core.patch_node_status, self.node, body) is None:
            return
        self._condition, self._condition_at = cond, now
        self.stats.condition_writes += 1

    def _failed(self, what: str, e: Exception | str) -> None:
        status = f"{e.status} " if isinstance(e, ApiException) else ""
        why = f"{what}: {status}{' '.join(str(getattr(e, 'reason', '') or e).split())[:200]}"
        self.stats.errors[what] += 1
        self.stats.last_error = why
        log.warning("%s", why)

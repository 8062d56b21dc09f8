"""``kubectl kpdoctor node NODE``: ``kpdoctor diagnose --live`` in a short-lived debug Pod on NODE.

The Pod has ``kubectl debug node/NODE --profile=sysadmin``'s semantics: pinned to the node by
``spec.nodeName`` (no scheduler, every taint tolerated), privileged, in the node's network, PID and
IPC namespaces, the node's ``/`` at ``/host`` (here read-only: kpdoctor only reads). Unlike
``kubectl debug``, the Pod is always deleted: after its report, on a failure, at the timeout, and
on Ctrl-C or SIGTERM; and ``activeDeadlineSeconds`` bounds it on the server too, should this
process die without a word (SIGKILL). The name is chosen here, not by ``generateName``, so that a
create whose answer never came can still be deleted.
"""

from __future__ import annotations

import codecs
import math
import random
import re
import signal
import string
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TextIO

from kpdoctor.about import __version__
from kpdoctor.kubectl_plugin.kube import api_error, body

CONTAINER = "kpdoctor"
DEFAULT_IMAGE = f"kpdoctor:{__version__}"
# waiting reasons after which the container will not start by itself
FATAL_WAITING = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
EXIT_USAGE, EXIT_INCONCLUSIVE, EXIT_INTERNAL, EXIT_INTERRUPTED = 2, 3, 4, 130


class Interrupted(BaseException):
    """SIGTERM or SIGHUP, handled like Ctrl-C: delete the Pod, then stop."""


@dataclass
class NodeRun:
    node: str
    namespace: str
    image: str = DEFAULT_IMAGE
    timeout: float = 300.0
    output: str = "text"
    service_account: str | None = None
    pull_policy: str = "IfNotPresent"
    min_severity: str | None = None
    poll: float = 1.0
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not self.name:
            self.name = pod_name(self.node)

    @property
    def diagnose_timeout(self) -> float:
        """kpdoctor's own bound inside the Pod: its default (120 s), less when ours is shorter."""
        return float(max(10, min(120, math.floor(self.timeout - 15))))


# kpdoctor diagnose --format (kpdoctor.report.FORMATS, not imported: the plugin starts fast)
REPORT_FORMATS = ("text", "json", "markdown", "sarif", "html")


def pod_name(node: str) -> str:
    """``kpdoctor-NODE-xxxxx``: a DNS label (63 at most) with a random suffix, like kubectl debug's."""
    suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
    stem = re.sub(r"[^a-z0-9-]+", "-", node.lower()).strip("-")[: 63 - len("kpdoctor--") - 5].strip("-")
    return f"kpdoctor-{stem}-{suffix}" if stem else f"kpdoctor-{suffix}"


def pod_manifest(run: NodeRun) -> dict[str, Any]:
    """The debug Pod (see the module docstring)."""
    command = [
        "kpdoctor",
        "diagnose",
        "--live",
        "--host-root",
        "/host",
        "--node",
        run.node,
        "--format",
        run.output,
        "--timeout",
        f"{run.diagnose_timeout:g}",
    ]
    if run.min_severity:
        command += ["--min-severity", run.min_severity]
    if not run.service_account:
        command.append("--no-cluster")  # no token in the Pod: say so, rather than a 401 in the report
    spec: dict[str, Any] = {
        "nodeName": run.node,
        "hostNetwork": True,
        "hostPID": True,
        "hostIPC": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "activeDeadlineSeconds": math.ceil(run.timeout) + 60,
        "tolerations": [{"operator": "Exists"}],
        "automountServiceAccountToken": bool(run.service_account),
        "containers": [
            {
                "name": CONTAINER,
                "image": run.image,
                "imagePullPolicy": run.pull_policy,
                "command": command,
                "env": [
                    {"name": "NODE_NAME", "value": run.node},
                    {"name": "XTABLES_LOCKFILE", "value": "/run/xtables.lock"},
                ],
                "securityContext": {"privileged": True, "runAsUser": 0},
                "volumeMounts": [
                    {"name": "host-root", "mountPath": "/host", "readOnly": True},
                    {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                ],
            }
        ],
        "volumes": [
            {"name": "host-root", "hostPath": {"path": "/"}},
            {"name": "xtables-lock", "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"}},
        ],
    }
    if run.service_account:
        spec["serviceAccountName"] = run.service_account
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": run.name,
            "namespace": run.namespace,
            "labels": {"app.kubernetes.io/name": "kpdoctor", "app.kubernetes.io/component": "node-debugger"},
            "annotations": {"kpdoctor.io/node": run.node, "kpdoctor.io/created-by": "kubectl-kpdoctor"},
        },
        "spec": spec,
    }


def confirmation(run: NodeRun) -> str:
    """What the user agrees to: a privileged Pod on their node."""
    who = f"service account {run.service_account}" if run.service_account else "no service account token"
    return (
        f"This creates Pod {run.namespace}/{run.name} on node {run.node}: privileged, in the node's network, PID "
        f"and IPC namespaces, with the node's / mounted read-only at /host and {who}.\n"
        f"It runs `kpdoctor diagnose --live` (reads only) from image {run.image} for at most {run.timeout:g} s, "
        "and is deleted afterwards."
    )


@contextmanager
def _terminating_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Interrupted` (Ctrl-C already raises KeyboardInterrupt)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextmanager
def _no_interrupts() -> Iterator[None]:
    """While the Pod is being deleted, a second Ctrl-C must not stop the deletion."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class _LogPump(threading.Thread):
    """Follows the container's log into ``out`` (a thread: the main one keeps the deadline and signals)."""

    def __init__(self, core: Any, run: NodeRun, out: TextIO) -> None:
        super().__init__(name="kpdoctor-log", daemon=True)
        self.core, self.run_, self.out = core, run, out
        self.received = 0  # bytes written to out
        self.error: str | None = None
        self.finished = False

    def run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            resp = self.core.read_namespaced_pod_log(
                self.run_.name, self.run_.namespace, container=CONTAINER, follow=True, _preload_content=False
            )
            try:
                for chunk in resp.stream(64 * 1024, decode_content=True):
                    self.out.write(decoder.decode(chunk))
                    self.out.flush()
                    self.received += len(chunk)
            finally:
                resp.release_conn()
            self.out.write(decoder.decode(b"", final=True))
            self.out.flush()
            self.finished = True
        except Exception as e:
            self.error = api_error(e)


class NodeDiagnosis:
    """One run of ``kubectl kpdoctor node`` (see the module docstring)."""

    def __init__(self, api: Any, run: NodeRun, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
        from kubernetes import client as k8s

        self.core: Any = k8s.CoreV1Api(api)  # answers read as JSON (_preload_content=False)
        self.run = run
        self.out, self.err = out, err
        self.created = False
        self.deleted = False

    def say(self, text: str) -> None:
        print(f"kubectl-kpdoctor: {text}", file=self.err, flush=True)

    # -- the whole run ----------------------------------------------------------------------------
    def __call__(self, confirm: Callable[[str], bool]) -> int:
        run = self.run
        try:
            node = body(self.core.read_node(run.node, _preload_content=False))
        except Exception as e:
            self.say(f"node {run.node}: {api_error(e)}")
            return EXIT_USAGE
        if not (node.get("metadata") or {}).get("name"):
            self.say(f"node {run.node}: not found")
            return EXIT_USAGE
        if not confirm(confirmation(run)):
            self.say("not confirmed: nothing created")
            return EXIT_USAGE
        deadline = time.monotonic() + run.timeout
        try:
            with _terminating_interrupts():
                return self._run(deadline)
        except (KeyboardInterrupt, Interrupted) as e:
            why = "interrupted" if isinstance(e, KeyboardInterrupt) else f"signal {e.args[0] if e.args else ''}"
            self.say(f"{why}: deleting Pod {run.namespace}/{run.name}")
            return EXIT_INTERRUPTED
        finally:
            if self.created and not self.deleted:
                with _no_interrupts():
                    self._delete()

    def _run(self, deadline: float) -> int:
        run = self.run
        self.say(f"creating Pod {run.namespace}/{run.name} on node {run.node} (image {run.image})")
        self.created = True  # from here on the Pod may exist, even if the answer never comes
        try:
            self.core.create_namespaced_pod(run.namespace, pod_manifest(run), _preload_content=False)
        except Exception as e:
            from kubernetes.client.exceptions import ApiException

            if isinstance(e, ApiException) and e.status and 400 <= e.status < 500:
                self.created = False  # refused (forbidden, invalid, exists): there is nothing to delete
            self.say(f"creating the Pod: {api_error(e)}")
            return EXIT_USAGE
        pod = self._wait(deadline, lambda phase: phase != "Pending")
        if isinstance(pod, int):
            return pod
        pump = _LogPump(self.core, run, self.out)
        pump.start()
        while pump.is_alive():
            if time.monotonic() >= deadline:
                return self._timed_out()
            pump.join(min(0.2, max(0.0, deadline - time.monotonic())))
        pod = self._wait(deadline, lambda phase: phase in ("Succeeded", "Failed"))
        if isinstance(pod, int):
            return pod
        if not pump.finished:
            self.say(f"the log stream broke ({pump.error}): reading the rest of the log")
            self._rest_of_log(pump.received)
        state = _terminated(pod)
        if state is None:
            self.say(f"Pod {run.name} ended ({pod['status'].get('phase')}) without an exit code")
            return EXIT_INCONCLUSIVE
        code = int(state.get("exitCode", EXIT_INTERNAL))
        if code > EXIT_INTERNAL:
            self.say(f"kpdoctor in Pod {run.name} ended with {code} ({state.get('reason') or 'no reason'})")
            return EXIT_INTERNAL
        return code

    def _wait(self, deadline: float, done: Callable[[str], bool]) -> dict[str, Any] | int:
        """Poll the Pod until ``done(phase)``; an exit code if it cannot start or time runs out."""
        while True:
            try:
                pod: dict[str, Any] = body(
                    self.core.read_namespaced_pod(self.run.name, self.run.namespace, _preload_content=False)
                )
            except Exception as e:
                self.say(f"reading Pod {self.run.name}: {api_error(e)}")
                return EXIT_INTERNAL
            status = pod.get("status") or {}
            phase = str(status.get("phase") or "Pending")
            if done(phase):
                return pod
            if phase in ("Succeeded", "Failed"):
                return pod
            waiting = _waiting(pod)
            if waiting and waiting.get("reason") in FATAL_WAITING:
                self.say(f"the container cannot start: {waiting.get('reason')}: {waiting.get('message') or ''}".strip())
                return EXIT_INCONCLUSIVE
            left = deadline - time.monotonic()
            if left <= 0:
                return self._timed_out(waiting)
            time.sleep(min(self.run.poll, left))

    def _timed_out(self, waiting: dict[str, Any] | None = None) -> int:
        how = f" (container waiting: {waiting.get('reason')})" if waiting else ""
        self.say(f"timed out after {self.run.timeout:g} s{how}: deleting Pod {self.run.namespace}/{self.run.name}")
        return EXIT_INCONCLUSIVE

    def _rest_of_log(self, received: int) -> None:
        try:
            resp = self.core.read_namespaced_pod_log(
                self.run.name, self.run.namespace, container=CONTAINER, _preload_content=False
            )
            data: bytes = resp.data or b""
        except Exception as e:
            self.say(f"reading the log: {api_error(e)}")
            return
        self.out.write(data[received:].decode("utf-8", errors="replace"))
        self.out.flush()

    def _delete(self) -> None:
        """Delete the Pod, now (grace 0): retried a few times; if it still stands, say how to."""
        run = self.run
        last = ""
        for attempt in range(3):
            try:
                self.core.delete_namespaced_pod(
                    run.name,
                    run.namespace,
                    grace_period_seconds=0,
                    propagation_policy="Background",
                    _preload_content=False,
                    _request_timeout=10,
                )
                self.deleted = True
                self.say(f"deleted Pod {run.namespace}/{run.name}")
                return
            except Exception as e:
                from kubernetes.client.exceptions import ApiException

                if isinstance(e, ApiException) and e.status == 404:
                    self.deleted = True
                    return
                last = api_error(e)
                time.sleep(0.5 * (attempt + 1))
        self.say(
            f"could not delete Pod {run.namespace}/{run.name} ({last}): "
            f"kubectl delete pod -n {run.namespace} {run.name}"
        )


def _container_status(pod: dict[str, Any]) -> dict[str, Any]:
    for st in (pod.get("status") or {}).get("containerStatuses") or []:
        if st.get("name") == CONTAINER:
            return dict(st)
    return {}


def _waiting(pod: dict[str, Any]) -> dict[str, Any] | None:
    w = (_container_status(pod).get("state") or {}).get("waiting")
    return dict(w) if isinstance(w, dict) else None


def _terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    t = (_container_status(pod).get("state") or {}).get("terminated")
    return dict(t) if isinstance(t, dict) else None

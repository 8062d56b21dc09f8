"""KP102-KP104: the xtables lock: not shared, not waited for, or held too long."""

from __future__ import annotations

import re
from collections.abc import Iterator

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import apply_remedy, kube_proxy_remedy, quiet_if_recovered, start
from kpdoctor.checks.registry import check
from kpdoctor.facts import Facts, containers_of, pod_spec_of
from kpdoctor.facts.log import RESTORE_VARIANT, restore_binary
from kpdoctor.facts.workloads import is_fragment
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.k8s import K8sObject
from kpdoctor.parse.logscan import signature
from kpdoctor.parse.system import Process
from kpdoctor.versions import FixRow, KubeVersion

RESTORE_LINE_FAILED = signature(
    "restore-line-failed",
    "tables-restore: line ",  # not "-restore": fewer lines to search in a log failing sync after sync
    r"ip6?tables-restore: line [0-9]+ failed",
    failure=True,
    variant=RESTORE_VARIANT,  # node_backend: the first hit naming each restore binary is kept
)
LOCK_NO_WAIT = signature(
    "xtables-lock-no-wait",
    "holding the xtables lock",
    r"holding the xtables lock. Perhaps you want to use the -w option",
    failure=True,
    variant=RESTORE_VARIANT,
)
OWN_LOCK_TIMEOUT = signature(
    "iptables-own-lock-timeout", " iptables lock: ", r"failed to acquire (new|old) iptables lock: (.*)", failure=True
)
RESTORE_NO_WAIT_ASSUMED = signature(
    "restore-wait-unsupported", "doesn't support --wait", r"assuming it doesn't support --wait"
)
LOCK_STOPPED_WAITING = signature(
    "xtables-lock-timeout",
    "holding the xtables lock",
    r"holding the xtables lock. Stopped waiting after ([0-9]+)s",
    failure=True,
    variant=RESTORE_VARIANT,
)

# Workloads that run iptables on the host (kube-proxy, CNIs, network-policy agents).
IPTABLES_WRITERS = re.compile(
    r"kube-proxy|calico|flannel|weave|kube-router|canal|antrea|cilium|aws-node|amazon-k8s-cni|azure-npm|"
    r"azure-cns|kube-ovn|ovnkube|multus|ip-masq-agent|node-local-dns|nodelocaldns|metallb|kube-vip|"
    r"tke-bridge|tke-eni|galaxy|istio-cni|linkerd-cni|network-policy|netpol",
    re.I,
)
LOCK_PATHS = {"/run/xtables.lock", "/var/run/xtables.lock", "/run", "/var/run"}


def _writes_iptables(obj: K8sObject) -> bool:
    spec = pod_spec_of(obj)
    text = obj.name + " " + " ".join(str(c.get("image") or "") for c in containers_of(obj))
    if IPTABLES_WRITERS.search(text):
        return True
    if not spec.get("hostNetwork"):
        return False
    for c in containers_of(obj):
        sc = c.get("securityContext") or {}
        if not isinstance(sc, dict):
            continue
        caps = (sc.get("capabilities") or {}).get("add") or []
        if sc.get("privileged") or "NET_ADMIN" in caps:
            return True
    return False


def _mounts_lock(obj: K8sObject) -> bool | None:
    """Whether the Pod (template) mounts the host's lock; None when a fragment leaves it unknown."""
    spec = pod_spec_of(obj)
    vols = spec.get("volumes")
    if is_fragment(obj) and ("volumes" not in spec or not all("volumeMounts" in c for c in containers_of(obj))):
        return None  # keys absent from a pasted part of a spec are unknown, not unset
    host_vols = {
        v["name"]: str(v["hostPath"].get("path") or "").rstrip("/") or "/"
        for v in (vols if isinstance(vols, list) else [])
        if isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("hostPath"), dict)
    }
    lock_vols = {name for name, path in host_vols.items() if path in LOCK_PATHS}
    if not lock_vols:
        return False
    for c in containers_of(obj):
        mounts = c.get("volumeMounts")
        for m in mounts if isinstance(mounts, list) else []:
            if isinstance(m, dict) and m.get("name") in lock_vols:
                return True
    return False


def unshared_writers(facts: Facts) -> list[K8sObject]:
    """DaemonSets/Pods that run iptables but do not mount the host's /run/xtables.lock."""
    seen: set[str] = set()
    out = []
    for obj in facts.objects.of("DaemonSet") + facts.objects.of("Pod"):
        if _writes_iptables(obj) and _mounts_lock(obj) is False:
            owner = obj.name.rsplit("-", 1)[0] if obj.kind == "Pod" else obj.name
            if owner in seen:
                continue
            seen.add(owner)
            out.append(obj)
    return out


def node_backend(facts: Facts) -> tuple[str | None, Cite | None]:
    """The backend iptables writers use on this node (legacy takes the lock; nft ignores it)."""
    for scope in ("kube-proxy", "host"):
        v = facts.iptables_version(scope)
        if v and v.value.short_backend:
            return v.value.short_backend, v.cite
        if v and not v.value.at_least(1, 8):
            return "legacy", v.cite
    for h in facts.log.hits(RESTORE_LINE_FAILED.id, LOCK_NO_WAIT.id, LOCK_STOPPED_WAITING.id):
        binary = restore_binary(h)
        if binary is not None and binary.short_backend:
            return binary.short_backend, Cite(h.artifact, h.line, h.text)
    return None, None


@check(
    "KP102",
    cause="xtables-lock-not-shared",
    title="An iptables writer does not share the host's xtables lock",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.K8S_OBJECTS],
)
def lock_not_shared(facts: Facts) -> Iterator[Finding]:
    """A Pod that runs iptables does not mount the host's /run/xtables.lock.

    Symptom: syncs fail with `Failed to execute iptables-restore: exit status 1
        (iptables-restore: line 123 failed)`, at random, more often when other agents
        (CNI, network policy, hostNetwork Pods) reprogram iptables.
    Cause: iptables-legacy serialises writers with flock(2) on /run/xtables.lock. A container
        that does not mount the host's file locks a private copy, so its restores run
        concurrently with the host's and the kernel rejects one of them. Only the legacy
        backend takes the lock; iptables-nft does not use it.
    How it is detected: the "line N failed" restore signature in kube-proxy's log, and
        DaemonSets/Pods that run iptables (kube-proxy, CNIs, network-policy agents, privileged
        hostNetwork Pods) without a hostPath volume for /run/xtables.lock (a pasted fragment of
        a spec without `volumes:` or `volumeMounts:` says nothing either way), weighed by the
        node's iptables backend. iptables-legacy prints the same "line N failed" when the kernel
        rejects a rule (a missing module or nfacct object), so without such a Pod the finding has
        medium confidence.
    Fix: mount the host's lock into every Pod that runs iptables:
        `volumes: [{name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}]`
        and `volumeMounts: [{name: xtables-lock, mountPath: /run/xtables.lock}]`.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/46103;
        https://github.com/rancher/rke/issues/1303
    """
    hits = facts.log.hits(RESTORE_LINE_FAILED.id)
    offenders = unshared_writers(facts) if facts.has(Kind.K8S_OBJECTS) else []
    if not hits and not offenders:
        return
    backend, bcite = node_backend(facts)
    names = ", ".join(o.ref for o in offenders)
    if hits:
        f = start(
            facts,
            "KP102",
            hits,
            confidence=Confidence.HIGH if offenders else Confidence.MEDIUM,
            summary='iptables-restore failed part-way ("line N failed"), the signature of concurrent writers.',
            severity=Severity.CRITICAL,
        )
        if offenders:
            f.summary += f" These run iptables without the host's /run/xtables.lock: {names}."
        else:
            f.summary += " Add the DaemonSets/Pods (kubectl get ds,pods -A -o json) to name the writer."
        quiet_if_recovered(f)
    else:
        f = start(
            facts,
            "KP102",
            [],
            confidence=Confidence.MEDIUM,
            summary=f"These run iptables without mounting the host's /run/xtables.lock: {names}. "
            "Their restores can collide with kube-proxy's.",
            severity=Severity.WARNING,
        )
    for o in offenders[:5]:
        f.evidence.append(Cite(o.artifact, o.line, f"{o.ref}: no hostPath volume for /run/xtables.lock"))
    if backend == "nft":
        f.severity = Severity.INFO
        f.confidence = Confidence.LOW
        f.summary += " The node uses iptables-nft, which does not take the lock, so this is not the cause here."
    elif backend == "legacy":
        f.summary += " The node uses iptables-legacy, which relies on the lock."
    if bcite:
        f.evidence.append(bcite)
    f.fix = [
        "Mount the host's /run/xtables.lock (hostPath, type FileOrCreate) into every Pod that runs "
        "iptables" + (f": {names}" if names else "") + ".",
    ]
    yield f


# TKE (seed 000): DaemonSet kube-proxy gets a restore with --wait from these builds.
NO_WAIT_FIXES = [
    FixRow((1, 12), "v1.12.4-tke.31", vendor="tke"),
    FixRow((1, 12), status="unaffected", vendor="tke", above=True),
    FixRow((1, 12), status="no-fix", vendor="tke", below=True, note="upgrade the TKE cluster"),
]


@check(
    "KP103",
    cause="iptables-restore-no-wait",
    title="iptables-restore cannot wait for the xtables lock",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.IPTABLES_VERSION],
)
def restore_no_wait(facts: Facts) -> Iterator[Finding]:
    """The iptables-restore in use has no --wait, so any contention fails the sync.

    Symptom: `Failed to execute iptables-restore: exit status 4 (Another app is currently
        holding the xtables lock. Perhaps you want to use the -w option?)`; rules update late
        because every contended sync is thrown away and retried at the next period.
    Cause: iptables-restore learnt `-w/--wait` in iptables 1.6.2; older binaries (and kube-proxy
        builds that ship them, or cannot read their version) give up immediately when another
        process holds the lock. kube-proxy passes `-w 5 -W 100000` only when the binary is 1.6.2+
        ("couldn't get iptables-restore version; assuming it doesn't support --wait").
    How it is detected: the exit-status-4 "-w option" message or kube-proxy's own "failed to
        acquire new iptables lock" in its log; the iptables version (< 1.6.2); kube-proxy's
        "assuming it doesn't support --wait" line.
    Fix: kube-proxy on the host: upgrade the node OS (CentOS 7.2+, Ubuntu 20.04+, TencentOS 2.4+)
        to get iptables >= 1.6.2. kube-proxy as a DaemonSet (TKE): 1.12 -> v1.12.4-tke.31 or
        later; clusters before 1.12: upgrade the cluster; 1.13+ are not affected.
    References: seed 000; https://github.com/kubernetes/kubernetes/pull/60978;
        kubernetes pkg/util/iptables (WaitRestoreMinVersion = 1.6.2)
    """
    hits = facts.log.hits(LOCK_NO_WAIT.id, OWN_LOCK_TIMEOUT.id)
    assumed = facts.log.hits(RESTORE_NO_WAIT_ASSUMED.id)
    old: list[tuple[str, Cite]] = []
    for scope in ("host", "kube-proxy"):
        v = facts.iptables_version(scope)
        if v and not v.value.at_least(1, 6, 2):
            old.append((f"{scope} iptables {v.value}", v.cite))
    if not hits and not (old and assumed):
        return
    if hits:
        f = start(
            facts,
            "KP103",
            hits,
            confidence=Confidence.HIGH,
            severity=Severity.WARNING,
        )
        parts = []
        if facts.log.count(LOCK_NO_WAIT.id):
            parts.append("iptables-restore gave up at once because another process held the xtables lock")
        if facts.log.count(OWN_LOCK_TIMEOUT.id):
            parts.append("kube-proxy could not take the xtables lock itself within its 2 s poll")
        f.summary = " and ".join(parts) + " (it runs iptables-restore without --wait)."
        f.summary = f.summary[0].upper() + f.summary[1:]
        if f.ongoing is not False and (f.occurrences or 0) > 3:
            f.severity = Severity.CRITICAL
            f.summary += " It keeps happening: rule updates are delayed sync after sync."
        quiet_if_recovered(f)
    else:
        f = start(
            facts,
            "KP103",
            [],
            confidence=Confidence.MEDIUM,
            summary="kube-proxy runs iptables-restore without --wait; the first lock contention will fail a sync.",
            severity=Severity.WARNING,
        )
    for h in assumed[:1]:
        f.evidence.append(Cite(h.artifact, h.line, h.text))
    for label, c in old:
        f.summary += f" {label} is older than 1.6.2 (no restore --wait)."
        f.evidence.append(c)
        f.versions_found[label.split(" iptables")[0] + " iptables"] = label.rsplit(" ", 1)[-1]
    f.fixed_in.append("iptables 1.6.2")
    rem, found, where = kube_proxy_remedy(facts, NO_WAIT_FIXES)
    if rem.affected is False:
        # This kube-proxy passes --wait whenever its iptables-restore can take it: the restore that
        # failed without it is an iptables older than 1.6.2 in its image, or another program's.
        f.versions_found.update(found)
        if where is not None and where not in f.evidence:
            f.evidence.append(where)
        f.confidence = Confidence.MEDIUM
        if f.severity == Severity.CRITICAL:
            f.severity = Severity.WARNING
        f.summary += (
            f" kube-proxy {found.get('kube-proxy', '')} itself passes --wait when its iptables-restore supports it, "
            "so the restore that failed ran an iptables older than 1.6.2 (in kube-proxy's image, or one whose "
            'version it could not read: look for "assuming it doesn\'t support --wait"), or it is another '
            "program's restore."
        )
    elif found.get("kube-proxy", "").find("tke") >= 0:
        apply_remedy(f, rem, found, where)
    else:
        f.versions_found.update(found)
    f.fix.append(
        "kube-proxy on the host: upgrade the node OS to get iptables >= 1.6.2 (CentOS 7.2+, Ubuntu 20.04+, "
        "TencentOS 2.4+). kube-proxy as a DaemonSet: use an image whose iptables is >= 1.6.2."
    )
    yield f


HOLDER_PROGRAMS = re.compile(
    r"^(ip6?tables(-legacy|-nft)?(-restore|-save)?|kube-router|calico-felix|calico-node|felix|flanneld|"
    r"weaver?|firewalld|ufw|kubelet|dockerd|kube-proxy|antrea-agent|cilium-agent|aws-k8s-agent|"
    r"configure-helper\.sh)$"
)


def _agent_ancestor(procs: dict[int, Process], p: Process) -> Process | None:
    """The long-running agent behind an iptables process (its nearest non-iptables ancestor)."""
    if not p.program.startswith(("iptables", "ip6tables")):
        return None
    cur = procs.get(p.ppid) if p.ppid else None
    for _ in range(5):
        if cur is None or cur.pid <= 1 or cur.program in ("containerd-shim", "containerd-shim-runc-v2", "containerd"):
            return None
        if not cur.program.startswith(("iptables", "ip6tables", "sh", "bash")):
            return cur
        cur = procs.get(cur.ppid) if cur.ppid else None
    return None


def lock_holders(facts: Facts) -> list[tuple[str, Cite, Cite | None]]:
    """Processes holding an flock that other processes wait for, or iptables-ish processes
    holding a write flock: (description, lock line, process line)."""
    procs = {p.pid: p for p in facts.processes}
    waited = {(lk.device, lk.inode) for lk, _ in facts.locks if lk.blocked}
    out = []
    for lk, art in facts.locks:
        if lk.blocked or lk.kind != "FLOCK" or lk.access != "WRITE":
            continue
        p = procs.get(lk.pid)
        contended = (lk.device, lk.inode) in waited
        iptablesish = p is not None and bool(HOLDER_PROGRAMS.match(p.program))
        if not (contended or iptablesish):
            continue
        desc = f"PID {lk.pid}" + (f" ({p.command[:120]})" if p else "")
        owner = _agent_ancestor(procs, p) if p else None
        if owner is not None:
            desc += f", started by PID {owner.pid} {owner.program}"
        if contended:
            desc += ", while other processes wait for the same lock"
        pcite = Cite(facts.process_artifact(), p.line, p.command) if p else None
        out.append((desc, Cite(art, lk.line, lk.text), pcite))
        if owner is not None:
            out.append(("", Cite(facts.process_artifact(), owner.line, owner.command), None))
    return out


KUBE_ROUTER_FIXED = KubeVersion(1, 3, 2, raw="v1.3.2")  # seed 000: TKE's NetworkPolicy add-on


def kube_router_version(facts: Facts) -> tuple[KubeVersion, Cite] | None:
    """kube-router's version from its DaemonSet/Pod image tag."""
    for obj in facts.objects.of("DaemonSet") + facts.objects.of("Pod"):
        for c in containers_of(obj):
            image = str(c.get("image") or "")
            if "kube-router" in image and ":" in image.rsplit("/", 1)[-1]:
                v = KubeVersion.parse(image.rsplit(":", 1)[1])
                if v:
                    return v, Cite(obj.artifact, obj.line, f"{obj.ref} image: {image}")
    return None


@check(
    "KP104",
    cause="xtables-lock-held-too-long",
    title="Another component holds the xtables lock too long",
    severity=Severity.WARNING,
    needs=[Kind.KUBE_PROXY_LOG, Kind.LOCKS],
)
def lock_held_too_long(facts: Facts) -> Iterator[Finding]:
    """Another process holds the xtables lock longer than kube-proxy waits (5 s).

    Symptom: `Failed to ensure that filter chain KUBE-SERVICES exists: error creating chain
        "KUBE-EXTERNAL-SERVICES": exit status 4: Another app is currently holding the xtables
        lock. Stopped waiting after 5s.`, or the structured `"Failed to execute iptables-restore"
        err=<exit status 4: ... Stopped waiting after 5s.`; rule updates are late or lost.
    Cause: kube-proxy waits 5 s (`-w 5`) for /run/xtables.lock. A network-policy agent (old
        kube-router: TKE recommends v1.3.2), a CNI, firewalld or a script that runs long iptables
        transactions keeps the lock longer.
    How it is detected: the "Stopped waiting after Ns" message in kube-proxy's log; the holder is
        named from /proc/locks (an flock other processes wait for, or one held by an
        iptables-ish program) joined with the process list.
    Fix: find the holder (`fuser -v /run/xtables.lock`, `lsof /run/xtables.lock`,
        `ps -ef | grep -E 'iptables|ip6tables'`), upgrade or reconfigure it to hold the lock
        briefly (TKE NetworkPolicy add-on: kube-router v1.3.2), and keep kube-proxy's
        minSyncPeriod at 1s or more.
    References: seed 000; https://github.com/cloudnativelabs/kube-router/issues/1057;
        https://github.com/kubernetes/kubernetes/issues/57428
    """
    hits = facts.log.hits(LOCK_STOPPED_WAITING.id)
    holders = lock_holders(facts) if facts.has(Kind.LOCKS) else []
    if not hits and not any("wait for the same lock" in d for d, _, _ in holders):
        return
    if hits:
        f = start(
            facts,
            "KP104",
            hits,
            confidence=Confidence.HIGH,
            summary=f"kube-proxy gave up waiting for the xtables lock after {hits[-1].groups[0]}s.",
            severity=Severity.WARNING,
        )
        if f.ongoing is not False and (f.occurrences or 0) > 3:
            f.severity = Severity.CRITICAL
            f.summary += " It keeps happening: rule updates are being lost."
        quiet_if_recovered(f)
    else:
        f = start(
            facts,
            "KP104",
            [],
            confidence=Confidence.MEDIUM,
            summary="Processes are waiting on a file lock held by another process.",
            severity=Severity.WARNING,
        )
    if holders:
        f.summary += " Holder: " + "; ".join(d for d, _, _ in holders[:4] if d) + "."
        for _, lc, pc in holders[:4]:
            f.evidence.append(lc)
            if pc:
                f.evidence.append(pc)
    elif facts.has(Kind.LOCKS):
        f.summary += " No lock holder was visible in the /proc/locks snapshot (the hold is intermittent)."
    else:
        f.summary += " Add /proc/locks and `ps -ef` from the node to name the holder."
    router = kube_router_version(facts)
    if router is not None:
        version, where = router
        f.versions_found["kube-router"] = str(version)
        f.evidence.append(where)
        if version.at_least(KUBE_ROUTER_FIXED) is False:
            f.fixed_in.append(f"kube-router {KUBE_ROUTER_FIXED}")
            f.summary += (
                f" kube-router {version} is older than {KUBE_ROUTER_FIXED}, whose predecessors hold the lock long."
            )
    f.fix = [
        "Find the holder: `fuser -v /run/xtables.lock` or `lsof /run/xtables.lock`, and "
        "`ps -ef | grep -E 'iptables|ip6tables'` for long-running restores.",
        "Upgrade or tune the holder so it holds the lock briefly (TKE NetworkPolicy add-on: kube-router v1.3.2).",
        "Keep kube-proxy's minSyncPeriod at 1s or more so it does not add to the contention.",
    ]
    yield f

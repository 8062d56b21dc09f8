"""KP102-KP104: the xtables lock: not shared, not waited for, or held too long."""

from __future__ import annotations

import re
from collections.abc import Iterator

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.common import (
    RESTORE_SYMPTOMS,
    apply_remedy,
    kube_proxy_remedy,
    note_version,
    quiet_if_recovered,
    start,
    suspect,
    version_rows,
)
from kpdoctor.facts import Facts, containers_of, pod_spec_of
from kpdoctor.facts.log import (
    RESTORE_VARIANT,
    captures,
    cite_line,
    iptables_call,
    is_other_writer,
    restore_binary,
)
from kpdoctor.facts.workloads import is_fragment
from kpdoctor.knowledge import check, messages, signature
from kpdoctor.model import Cite, Confidence, Finding, Severity
from kpdoctor.parse.k8s import K8sObject
from kpdoctor.parse.logscan import Hit
from kpdoctor.parse.system import Process
from kpdoctor.versions import FixRow, KubeVersion

RESTORE_LINE_FAILED = signature(
    "restore-line-failed",
    "tables-restore: line ",  # not "-restore": fewer lines to search in a log failing sync after sync
    r"ip6?tables-restore: line [0-9]+ failed",
    failure=True,
    variant=RESTORE_VARIANT,  # node_backend: the first hit naming each restore binary is kept
)
# iptables' lock messages (a message broken across lines in a paste is joined back by the intake)
LOCK_NO_WAIT = messages("xtables-lock-no-wait", "iptables/lock-held-no-wait", failure=True, variant=RESTORE_VARIANT)
OWN_LOCK_TIMEOUT = messages(
    "iptables-own-lock-timeout",
    "kube-proxy/util-iptables-acquire-lock-failed",
    "kube-proxy/util-iptables-acquire-old-lock-failed",
    failure=True,
)
RESTORE_NO_WAIT_ASSUMED = messages(
    "restore-wait-unsupported",
    "kube-proxy/util-iptables-restore-version-unknown",
    "kube-proxy/util-iptables-restore-version-unparsable",
)
# The kernel refused an iptables change because the table changed under it (EAGAIN, exit status
# 4): two writers ran at once. Any writer's line is evidence (go-iptables callers print
# "running [/sbin/iptables ... --wait]: exit status 4: iptables: Resource temporarily
# unavailable."). Not a fork/exec EAGAIN ("fork/exec ...: resource temporarily unavailable"):
# that is a node out of processes or threads, and never a lock.
IPTABLES_EAGAIN = signature(
    "iptables-eagain",
    "Resource temporarily unavailable",
    r"exit status 4: ip6?tables(-legacy|-nft)?: Resource temporarily unavailable",
)
# kubelet could not mount the host's lock file into a Pod: the path exists but is not a file
# (a directory created in its place), so no Pod can share the host's lock through it.
LOCK_NOT_A_FILE = signature(
    "xtables-lock-not-a-file",
    "xtables.lock is not a file",
    r"hostPath type check failed: (/var)?/run/xtables\.lock is not a file",
)
# ... and what a writer whose Pod mounted that directory says when it opens the lock itself
LOCK_IS_A_DIRECTORY = signature(
    "xtables-lock-is-a-directory",
    "xtables.lock: is a directory",
    r"open (/var)?/run/xtables\.lock: is a directory",
    failure=True,
)
# iptables-restore rejecting the argument glued to its wait flag: kube-proxy 1.9 passed "-w5",
# which iptables-restore 1.6.2+ refuses (RHEL/CentOS 7's 1.4.21 backport prints the same error).
RESTORE_WAIT_ARG_REJECTED = signature(
    "restore-wait-arg-rejected",
    "tables-restore: invalid option -- '",
    r"ip6?tables-restore: invalid option -- '[0-9]'",
)
# The usage text iptables-restore prints after refusing an option: RHEL/CentOS 7.6's 1.4.21
# backport (iptables-1.4.21-28.el7) takes the wait only as `--wait=<seconds>` and lists `-W
# usecs` but no `-w` (1.6.2+ lists `[-w secs] [-W usecs]`), so it refuses kube-proxy 1.9's "-w5".
RESTORE_USAGE_LONG_WAIT_ONLY = signature(
    "restore-usage-long-wait-only",
    "[-h] [-W usecs]",
    r"Usage: ip6?tables-restore .*\[-h\] \[-W usecs\]",
)
# Calico's felix: its iptables(-restore) failed with exit status 4, iptables' "resource problem"
# (the xtables lock was held and it did not wait, or gave up waiting).
FELIX_RESOURCE_PROBLEM = signature(
    "felix-iptables-exit-4",
    "error=exit status 4",
    r"Failed to [a-z]+ ip6?tables[^=]*error=exit status 4",
)
# Errors in the same record that explain a "line N failed" (the restore was refused for that
# reason, not because another writer changed the table): the restore rejected its arguments, or
# could not load a match/target, or a chain was missing.
_EXPLAINED_RESTORE = lazy_re.compile(
    r"invalid option|unknown option|Couldn't load (?:target|match)|No chain/target/match by that name|"
    r"Bad argument|does not exist|Chain '[^']+' does not exist"
)
LOCK_STOPPED_WAITING = messages(
    "xtables-lock-timeout", "iptables/lock-held-stopped-waiting", failure=True, variant=RESTORE_VARIANT
)

# Workloads that run iptables on the host (kube-proxy, CNIs, network-policy agents).
IPTABLES_WRITERS = lazy_re.compile(
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
        if v and v.value.short_variant:
            return v.value.short_variant, v.cite
        if v and not v.value.at_least(1, 8):
            return "legacy", v.cite
    for h in facts.log.hits(RESTORE_LINE_FAILED.id, *LOCK_NO_WAIT.ids, *LOCK_STOPPED_WAITING.ids):
        binary = restore_binary(h)
        if binary is not None and binary.short_variant:
            return binary.short_variant, Cite(h.artifact, h.line, h.text)
    return None, None


@check(
    "KP102",
    cause="xtables-lock-not-shared",
    title="An iptables writer does not share the host's xtables lock",
    severity=Severity.CRITICAL,
    needs=[Kind.KUBE_PROXY_LOG, Kind.K8S_OBJECTS],
    explains=RESTORE_SYMPTOMS,
)
def lock_not_shared(facts: Facts) -> Iterator[Finding]:
    """A Pod that runs iptables does not lock the host's /run/xtables.lock.

    Symptom: syncs fail with `Failed to execute iptables-restore: exit status 1
        (iptables-restore: line 123 failed)`, at random, more often when other agents
        (CNI, network policy, hostNetwork Pods) reprogram iptables; other writers' calls fail
        with `running [/sbin/iptables -t nat -C POSTROUTING ... --wait]: exit status 4:
        iptables: Resource temporarily unavailable.`; or kubelet cannot mount the lock at all:
        `MountVolume.SetUp failed for volume "xtables-lock" : hostPath type check failed:
        /run/xtables.lock is not a file`.
    Cause: iptables-legacy serialises writers with flock(2) on /run/xtables.lock. A container
        that does not mount the host's file locks a private copy, so its changes run
        concurrently with the host's and the kernel rejects one of them (EAGAIN: the table
        changed under it). A caller that passed `--wait` and still got EAGAIN held *a* lock,
        just not the one the other writer took. When the host path was created as a directory
        (a Pod mounting it without `type: FileOrCreate` before the file existed), no Pod can
        mount the file. Only the legacy backend takes the lock; iptables-nft does not use it.
    How it is detected: an EAGAIN (exit status 4, "Resource temporarily unavailable") from any
        writer's iptables call, naming the writer from the line itself; the hostPath type check
        failing on /run/xtables.lock; DaemonSets/Pods that run iptables (kube-proxy, CNIs,
        network-policy agents, privileged hostNetwork Pods) without a hostPath volume for
        /run/xtables.lock (a pasted fragment of a spec without `volumes:` or `volumeMounts:`
        says nothing either way), weighed by the node's iptables backend. iptables-restore's
        "line N failed" (its commit refused by the kernel) is the same collision, but also
        what a rule the kernel cannot load gives: alone it counts only when the failures come
        and go (syncs succeed between them), and never when its own record gives another
        reason ("invalid option", a missing chain or target).
    Fix: mount the host's lock into every Pod that runs iptables:
        `volumes: [{name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}]`
        and `volumeMounts: [{name: xtables-lock, mountPath: /run/xtables.lock}]`; when the path
        is a directory, replace it with a file (`rmdir /run/xtables.lock && touch
        /run/xtables.lock`, and create it at boot) before the Pods start.
    References: seed 000; https://github.com/kubernetes/kubernetes/issues/46103;
        https://github.com/rancher/rke/issues/1303;
        https://github.com/kubernetes-sigs/kubespray/pull/3191;
        https://github.com/cloudnativelabs/kube-router/issues/506;
        https://github.com/aws/amazon-vpc-cni-k8s/issues/2840
    """
    restores = [h for h in facts.log.hits(RESTORE_LINE_FAILED.id) if not _EXPLAINED_RESTORE.search(h.record)]
    eagain = facts.log.hits(IPTABLES_EAGAIN.id)
    not_file = facts.log.hits(LOCK_NOT_A_FILE.id)
    is_dir = facts.log.hits(LOCK_IS_A_DIRECTORY.id)
    offenders = unshared_writers(facts) if facts.has(Kind.K8S_OBJECTS) else []
    # "line N failed" that comes and goes (syncs succeed between or after the failures) is what
    # colliding writers look like; one that fails every time is a rule the kernel refuses.
    intermittent = bool(restores) and (
        facts.log.successes_between(restores[0], restores[-1]) or facts.log.successes_after_count(restores[-1]) > 0
    )
    corroborated = bool(offenders or eagain or not_file or is_dir or intermittent)
    if not corroborated:
        return
    backend, bcite = node_backend(facts)
    names = ", ".join(o.ref for o in offenders)
    hits = sorted(not_file + is_dir + eagain + restores, key=lambda h: h.order)
    parts: list[str] = []
    confidence = Confidence.MEDIUM
    severity = Severity.CRITICAL
    writers: list[str] = []
    if not_file:
        parts.append(
            f"{_whose(not_file[0], 'kubelet')} could not mount the host's /run/xtables.lock into a Pod: the path is "
            "not a file (a directory was created in its place, by a Pod that mounted it without "
            "`type: FileOrCreate` before the file existed). That Pod cannot start, and no Pod can share the "
            "host's lock through it."
        )
        confidence = Confidence.HIGH
    if is_dir:
        parts.append(
            f"{_whose(is_dir[0], 'kube-proxy')} cannot open the iptables lock: /run/xtables.lock is a directory in "
            "its mount (a hostPath mounted without `type: FileOrCreate` before the file existed makes the kubelet "
            "create a directory there), so every restore that takes the lock fails and it shares no lock with the "
            "node's other writers."
        )
        confidence = Confidence.HIGH
    if eagain:
        waited = [h for h in eagain if (call := iptables_call(h)) is not None and call[1]]
        writers = list(dict.fromkeys(_whose(h, "an iptables caller") for h in eagain))
        who = " and ".join(writers)
        if waited:
            parts.append(
                f'{who} ran iptables with --wait and still got EAGAIN (exit status 4, "Resource temporarily '
                'unavailable"): it held an xtables lock, yet another writer changed the table at the same time, so '
                "the two do not lock the same file (a container with its own /run/xtables.lock)."
            )
            confidence = Confidence.HIGH
        else:
            parts.append(
                f'{who}\'s iptables call failed with EAGAIN (exit status 4, "Resource temporarily unavailable"): '
                "another writer changed the table at the same time, without taking the same xtables lock."
            )
        if all(is_other_writer(h) for h in eagain) and not restores:
            # Another component's calls fail; kube-proxy's own failures are not in the evidence.
            severity = Severity.WARNING if not not_file else severity
    if restores:
        between = ", now and then with syncs succeeding in between: the signature of concurrent writers."
        parts.append(
            'iptables-restore failed part-way ("line N failed", the kernel refused its commit)'
            + (between if intermittent else ".")
        )
    if offenders:
        parts.append(f"These run iptables without the host's /run/xtables.lock: {names}.")
        confidence = Confidence.HIGH if (restores or eagain or not_file) else Confidence.MEDIUM
        if not (restores or eagain or not_file):
            severity = Severity.WARNING
    elif not not_file:
        parts.append("Add the DaemonSets/Pods (kubectl get ds,pods -A -o json) to name the Pods without the mount.")
    f = start(facts, "KP102", hits, confidence=confidence, summary=" ".join(parts), severity=severity)
    if not hits:
        f.summary += " Their restores can collide with kube-proxy's."
    elif restores and not (eagain or not_file):
        quiet_if_recovered(f)
    for o in offenders[:5]:
        f.evidence.append(Cite(o.artifact, o.line, f"{o.ref}: no hostPath volume for /run/xtables.lock"))
    if backend == "nft" and not not_file:
        f.severity = Severity.INFO
        f.confidence = Confidence.LOW
        f.summary += " The node uses iptables-nft, which does not take the lock, so this is not the cause here."
    elif backend == "legacy":
        f.summary += " The node uses iptables-legacy, which relies on the lock."
    if bcite:
        f.evidence.append(bcite)
    targets = names or " and ".join(w for w in writers if not w.startswith(("a program", "an iptables"))) or ""
    if not_file:
        f.fix.append(
            "On the node, replace the directory with a file before the Pods start: `rmdir /run/xtables.lock && "
            "touch /run/xtables.lock` (and create the file at boot, e.g. a systemd-tmpfiles entry), then restart "
            "the Pods that failed to mount it."
        )
    f.fix.append(
        "Mount the host's /run/xtables.lock (hostPath, type FileOrCreate) into every Pod that runs iptables"
        + (f": {targets}" if targets else "")
        + "."
    )
    yield f


def _waiters(hits: list[Hit]) -> str:
    """Who waited for the lock: kube-proxy unless the lines say another component wrote them."""
    return " and ".join(dict.fromkeys((h.writer or "kube-proxy") if is_other_writer(h) else "kube-proxy" for h in hits))


def _whose(hit: Hit, unknown: str) -> str:
    """The component that wrote a hit's line, for a summary ("flannel"), or ``unknown``."""
    w = hit.writer
    if w is not None:
        return w
    if iptables_call(hit) is not None:
        return "a program using go-iptables (a CNI or network-policy agent)"
    return unknown


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
    explains=RESTORE_SYMPTOMS,
    versions=version_rows(NO_WAIT_FIXES, "seed 000"),
)
def restore_no_wait(facts: Facts) -> Iterator[Finding]:
    """The iptables-restore in use has no working --wait, so any contention fails the sync.

    Symptom: `Failed to execute iptables-restore: exit status 4 (Another app is currently
        holding the xtables lock. Perhaps you want to use the -w option?)`; rules update late
        because every contended sync is thrown away and retried at the next period. Or every
        restore fails at once: `Failed to execute iptables-restore: exit status 1
        (iptables-restore: invalid option -- '5'`, followed by a usage text without `-w`. Other
        writers show it too: Calico's felix
        `Failed to program iptables ... error=exit status 4`.
    Cause: iptables-restore learnt `-w/--wait` in iptables 1.6.2; older binaries (and kube-proxy
        builds that ship them, or cannot read their version) give up immediately when another
        process holds the lock. kube-proxy passes `-w 5 -W 100000` only when the binary is 1.6.2+
        ("couldn't get iptables-restore version; assuming it doesn't support --wait").
        kube-proxy 1.9 passed the wait as "-w5", which iptables-restore 1.6.2+ rejects
        ("invalid option -- '5'"; RHEL/CentOS 7's 1.4.21 backport prints the same), so no
        restore succeeds; fixed in 1.10 by passing "-w 5". Another writer running
        iptables-restore 1.6.2+ without a wait (calico-node 3.2.x's felix) fails with exit
        status 4, iptables' resource problem, whenever kube-proxy or a CNI holds the lock.
    How it is detected: the exit-status-4 "-w option" message or kube-proxy's own "failed to
        acquire new iptables lock" in its log; iptables-restore's "invalid option -- 'N'", or,
        at low confidence, the usage text of RHEL/CentOS 7.6's backport (`--wait=<seconds>`
        and `-W usecs`, no `-w`) that it prints after refusing an option; the
        iptables version (< 1.6.2); kube-proxy's "assuming it doesn't support --wait" line;
        felix's exit status 4. Whose line it is is read from the line (syslog identifier,
        source file, format): another component's failure names that component, not
        kube-proxy.
    Fix: kube-proxy on the host: upgrade the node OS (CentOS 7.2+, Ubuntu 20.04+, TencentOS 2.4+)
        to get iptables >= 1.6.2. kube-proxy as a DaemonSet (TKE): 1.12 -> v1.12.4-tke.31 or
        later; clusters before 1.12: upgrade the cluster; 1.13+ are not affected. kube-proxy
        1.9 rejected with "invalid option": upgrade to 1.10.0 or later (or a 1.9 build with the
        backport). Another writer: upgrade it to a release that waits for the lock.
    References: seed 000; https://github.com/kubernetes/kubernetes/pull/60978;
        https://github.com/kubernetes/kubernetes/issues/58956;
        https://github.com/kubernetes/kubernetes/pull/61734;
        https://github.com/projectcalico/felix/pull/1903;
        kubernetes pkg/util/iptables (WaitRestoreMinVersion = 1.6.2)
    """
    bad_arg = facts.log.hits(RESTORE_WAIT_ARG_REJECTED.id)
    no_wait = facts.log.hits(*LOCK_NO_WAIT.ids, *OWN_LOCK_TIMEOUT.ids)
    own = [h for h in no_wait if not is_other_writer(h)]
    others = [h for h in no_wait if is_other_writer(h)] + facts.log.hits(FELIX_RESOURCE_PROBLEM.id)
    assumed = facts.log.hits(*RESTORE_NO_WAIT_ASSUMED.ids)
    old: list[tuple[str, Cite]] = []
    for scope in ("host", "kube-proxy"):
        v = facts.iptables_version(scope)
        if v and not v.value.at_least(1, 6, 2):
            old.append((f"{scope} iptables {v.value}", v.cite))
    if bad_arg:
        yield _wait_arg_rejected(facts, bad_arg)
    elif usage := facts.log.hits(RESTORE_USAGE_LONG_WAIT_ONLY.id):
        yield from _long_wait_only(facts, usage)
    if others:
        yield _other_writer_no_wait(facts, others)
    if not bad_arg and not own and assumed and not old:
        yield _assumed_no_wait(facts, assumed)
        return
    if bad_arg or (not own and not (old and assumed)):
        return
    if own:
        f = start(
            facts,
            "KP103",
            own,
            confidence=Confidence.HIGH,
            severity=Severity.WARNING,
        )
        parts = []
        if any(h.sig in LOCK_NO_WAIT.ids for h in own):
            parts.append("iptables-restore gave up at once because another process held the xtables lock")
        if any(h.sig in OWN_LOCK_TIMEOUT.ids for h in own):
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
        f.evidence.append(cite_line(h))
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


WAIT_ARG_FIXED = KubeVersion(1, 10, 0, raw="v1.10.0")  # kubernetes#60978 ("-w 5", not "-w5")


def _wait_arg_rejected(facts: Facts, hits: list[Hit]) -> Finding:
    """iptables-restore refused the "-w5" kube-proxy 1.9 passes: no restore can succeed."""
    whose = _whose(hits[0], "kube-proxy")
    f = start(facts, "KP103", hits, confidence=Confidence.HIGH, severity=Severity.CRITICAL)
    f.summary = (
        f"iptables-restore rejected the wait flag {'kube-proxy' if whose == 'kube-proxy' else whose} passed it "
        '("invalid option -- \'N\'": the timeout glued to the flag, "-w5", as kube-proxy 1.9 passes it). '
        "iptables-restore 1.6.2 and later refuse it, and RHEL/CentOS 7's iptables 1.4.21 with the wait backport "
        "prints the same error, so the restores fail and Service rules are not updated."
    )
    kpv = facts.kube_proxy_version
    if kpv is not None:
        f.versions_found["kube-proxy"] = str(kpv.value)
        f.evidence.append(kpv.cite)
        if kpv.value.upstream >= WAIT_ARG_FIXED.upstream:
            f.confidence = Confidence.MEDIUM
            f.summary += f' kube-proxy {kpv.value} passes "-w 5" itself: the failing restore is another program\'s.'
        elif (kpv.value.major, kpv.value.minor) == (1, 9):
            f.summary += f" kube-proxy {kpv.value} is affected."
    f.fixed_in.append(str(WAIT_ARG_FIXED))
    f.fix.append(
        f'Upgrade kube-proxy to {WAIT_ARG_FIXED} or later (kubernetes PR #60978 passes "-w 5"), or to a 1.9 '
        "build with its backport (PR #61734); kube-proxy 1.9.6 is still reported affected."
    )
    return f


def _long_wait_only(facts: Facts, hits: list[Hit]) -> Iterator[Finding]:
    """Only the usage text of the RHEL/CentOS 7.6 backport, which it prints when it refuses an
    option: the "-w5" refusal is likely, unless kube-proxy passes "-w 5" itself."""
    kpv = facts.kube_proxy_version
    if kpv is not None and kpv.value.upstream >= WAIT_ARG_FIXED.upstream:
        return
    f = start(facts, "KP103", hits, confidence=Confidence.LOW, severity=Severity.WARNING)
    f.confidence_reason = "the usage text of a build known to refuse the glued wait, without the refusal itself"
    f.summary = (
        "iptables-restore printed its usage text, which it does when it refuses an option, and that text lists "
        "the lock wait only as `--wait=<seconds>` and `-W usecs` with no `-w`: RHEL/CentOS 7.6's iptables 1.4.21 "
        'with the wait backport, which refuses the "-w5" kube-proxy 1.9 passes ("invalid option -- \'5\'"), so '
        "every restore fails."
    )
    note_version(f, kpv, "kube-proxy")
    f.fixed_in.append(str(WAIT_ARG_FIXED))
    f.fix.append(
        "Give the error line before the usage text and kube-proxy's version; with kube-proxy 1.9, upgrade it to "
        f'{WAIT_ARG_FIXED} or later (kubernetes PR #60978 passes "-w 5").'
    )
    yield f


def _other_writer_no_wait(facts: Facts, hits: list[Hit]) -> Finding:
    """Another component's iptables-restore could not take the xtables lock and did not wait."""
    writers = list(dict.fromkeys(_whose(h, "another program") for h in hits))
    who = " and ".join(writers)
    f = start(facts, "KP103", hits, confidence=Confidence.MEDIUM, severity=Severity.WARNING)
    f.summary = (
        f"{who}'s iptables-restore failed with exit status 4, iptables' resource problem: another writer held the "
        "xtables lock and it did not wait for it (a restore without --wait, or an iptables-restore 1.6.2+ that "
        "takes the lock but was given no wait; calico-node 3.2.x's felix ran it so). This is a node-level "
        "contention between iptables writers, not a kube-proxy fault. A writer that does not share the lock "
        "(KP102) is the less likely reading: a restore that finds the lock held shares it with the holder, and "
        'collisions between writers with different lock files are refused by the kernel ("line N failed") '
        "rather than by the lock."
    )
    if f.ongoing is not False and (f.occurrences or 0) > 3:
        f.severity = Severity.CRITICAL
    f.fix.append(
        f"Upgrade {who} to a release whose iptables-restore waits for the lock (Calico: projectcalico/felix PR "
        "#1903 makes felix use iptables-restore's own wait), and mount the host's /run/xtables.lock into its Pods."
    )
    f.fix.append("Keep kube-proxy's minSyncPeriod at 1s or more so that it holds the lock less often.")
    return f


HOLDER_PROGRAMS = lazy_re.compile(
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
    explains=RESTORE_SYMPTOMS,
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
    hits = facts.log.hits(*LOCK_STOPPED_WAITING.ids)
    holders = lock_holders(facts) if facts.has(Kind.LOCKS) else []
    if not hits and not any("wait for the same lock" in d for d, _, _ in holders):
        return
    if hits:
        waited = captures(hits[-1]).get("seconds", "?")
        f = start(
            facts,
            "KP104",
            hits,
            confidence=Confidence.HIGH,
            summary=f"{_waiters(hits)} gave up waiting for the xtables lock after {waited}s.",
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


def _assumed_no_wait(facts: Facts, assumed: list[Hit]) -> Finding:
    """kube-proxy says it runs iptables-restore without --wait, and nothing yet shows it failing:
    suspected, with what decides it."""
    f = start(facts, "KP103", assumed, confidence=Confidence.LOW, severity=Severity.INFO)
    suspect(
        f,
        "kube-proxy's own words that it runs iptables-restore without --wait; its binary's version was not given",
        ["kubectl -n kube-system exec <kube-proxy pod> -- iptables-restore --version"],
    )
    f.summary = (
        "kube-proxy could not read its iptables-restore's version and runs it without --wait: while another "
        "writer holds the xtables lock, a sync then fails at once (exit status 4) instead of waiting. Whether "
        "it will depends on that binary: `iptables-restore --version` inside kube-proxy's container decides "
        "(--wait exists from 1.6.2)."
    )
    f.fix = ["Send `iptables-restore --version` (and `iptables --version`) from inside the kube-proxy container."]
    return f

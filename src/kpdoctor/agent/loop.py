"""The agent's cycle and its schedule.

One thread runs the cycles, so two never overlap: every ``interval`` seconds (jittered, so a
cluster's agents do not all collect at once), or sooner when asked (``request``; requests made
while a cycle runs are all answered by the next one). After a cycle the next one waits at least
as long as that cycle took, so the agent never keeps more than half a core busy however often
it is asked. The process runs at a low priority (``nice``), and so do the commands it runs.

A cycle: collect the node (the node's own binaries, through the host root, as ``--live
--host-root`` does; the reads take no xtables lock), add the cluster as the watches last saw it
(never waiting on the API server: the first cycle waits for the first lists until
:attr:`Agent.sync_until` at most, and a cluster not reached yet is said as not collected),
run the pipeline with the previous cycle's verification results carried over where nothing
changed (dataplane/reuse.py; a full pass every ``full_every`` cycles), hold back findings that
rest only on counters not spiking (counters.py), then tell the cluster what changed
(node_status.py). Memory stays flat: a cycle's evidence and facts are dropped when it ends, and
only the results needed for the next cycle are kept.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import logging
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kpdoctor import knowledge, memo
from kpdoctor.agent.cluster import ClusterCache
from kpdoctor.agent.counters import CounterGate
from kpdoctor.agent.node_status import DEFAULT_CONDITION, Condition, NodeReporter, camel, condition_for
from kpdoctor.bundle.contents import Collected, NotCollected
from kpdoctor.bundle.loader import Evidence, add_collected
from kpdoctor.collect.kube_proxy import collect_kube_proxy
from kpdoctor.collect.node import collect_node
from kpdoctor.collect.record import Budget, quiet, utc_now
from kpdoctor.collect.redact import redact_secrets, redact_text
from kpdoctor.collect.runner import Host, Runner
from kpdoctor.dataplane.reuse import Carried, Reuse
from kpdoctor.diagnose import pipeline
from kpdoctor.facts import Facts
from kpdoctor.model import Confidence, Finding, Report, Severity

log = logging.getLogger("kpdoctor.agent")

COUNTERS = "node/counters/"
KERNEL_LOG = "node/dmesg.txt"
AGENT_LOG_TAIL = 4 * 1024**2  # a few minutes of kube-proxy's log, not its history
WRITE_SECONDS = 15.0  # a cycle's Events and condition, at most (less with a short --timeout)
# kube-proxy applies a Service's change within its minSyncPeriod (1 s by default) and the sync
# itself (well under a second for a few hundred Services, seconds for tens of thousands): a
# finding about a Service changed less than this before the node was read may be that change on
# its way (CheckSpec.settles). It is held, and the node read again once the change has settled.
SETTLE_SECONDS = 10.0


@dataclass
class AgentOptions:
    node: str
    host_root: str | None = None
    interval: float = 300.0
    jitter: float = 0.1  # +- this share of the interval
    full_every: int = 12  # a full verification every this many cycles (once an hour by default)
    timeout: float = 120.0  # one cycle's collection
    min_severity: Severity = Severity.WARNING
    log_tail: int = AGENT_LOG_TAIL
    nice: int = 10
    settle: float = SETTLE_SECONDS  # a Service change younger than this when the node is read may be on its way


class Durations:
    """A histogram's cumulative buckets, kept by the agent (the collector reads a copy)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        i = next((k for k, b in enumerate(self.bounds) if seconds <= b), len(self.bounds))
        self.counts[i] += 1
        self.total += seconds

    def snapshot(self) -> tuple[list[tuple[float, int]], float]:
        out, acc = [], 0
        for b, c in zip([*self.bounds, float("inf")], self.counts, strict=True):
            acc += c
            out.append((b, acc))
        return out, self.total


@dataclass
class AgentStatus:
    """What the last cycle left (a copy, for the HTTP handlers and the metrics)."""

    started: float
    cycle: int = 0  # cycles finished
    running: bool = False
    cycles: Counter[str] = field(default_factory=Counter)
    durations: Durations = field(default_factory=lambda: Durations((0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)))
    last_cpu: float | None = None
    last_wall: float | None = None
    last_success: float | None = None  # unix time
    last_start: float | None = None  # monotonic
    last_error: str = ""
    report: Report | None = None
    findings: list[Finding] = field(default_factory=list)  # reported (after the counter gate)
    held: list[Finding] = field(default_factory=list)  # held back (counters not spiking, a change settling)
    mode: str | None = None
    evaluated: int = 0
    reused: int = 0
    full: bool = True
    collection_errors: Counter[str] = field(default_factory=Counter)
    sources: dict[str, bool] = field(default_factory=dict)
    condition: Condition | None = None
    # CPU seconds of the last cycle's stages (the node's commands included in "collect")
    stage_cpu: dict[str, float] = field(default_factory=dict)


def _libc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None elsewhere (musl, macOS)."""
    try:
        import ctypes
        import ctypes.util

        name = ctypes.util.find_library("c")
        trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None
    return trim


_TRIM = _libc_trim()


def give_back_memory() -> None:
    """Return the heap's free memory to the system after a cycle: a cycle frees hundreds of MB
    (at 10,000 Services) that malloc would otherwise keep, and a DaemonSet's resident size is what
    its limits count. About 10 ms."""
    if _TRIM is not None:
        _TRIM(0)


def finding_key(f: Finding) -> tuple[str, str, str]:
    return (f.code, f.cause, str(f.subject.get("service") or ""))


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Agent:
    """The node agent (see the module docstring). ``collect`` is how the node is read (the host
    collection by default, from ``host``: the node's root and network namespace); ``cluster`` and
    ``reporter`` are None without an API server."""

    def __init__(
        self,
        opts: AgentOptions,
        *,
        cluster: ClusterCache | None = None,
        reporter: NodeReporter | None = None,
        collect: Callable[[], tuple[list[Collected], list[NotCollected]]] | None = None,
        condition_type: str = DEFAULT_CONDITION,
        host: Host | None = None,
    ) -> None:
        self.opts = opts
        self.node = opts.node
        self.cluster = cluster
        self.reporter = reporter
        self.condition_type = condition_type
        self.collect = collect or self.collect_node
        self.gate = CounterGate()
        self._host = host or Host.detect(opts.host_root)
        self._previous: Carried | None = None
        self._prev_counters: list[Collected] = []
        self._known: dict[tuple[str, str, str], Finding] = {}
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._requested = 0  # the cycle number that will answer the last request
        self._status = AgentStatus(started=time.monotonic())
        self.cluster_note = ""  # why there is no cluster view (yet): said as not collected
        self.sync_until: float | None = None  # the next cycle waits for the first lists until then (monotonic)
        self.recheck_at: float | None = None  # a held finding's change settles then: a cycle soon after (monotonic)
        self.proxy_running: bool | None = None  # the last collection found kube-proxy's process (None: not looked)
        self._attached = threading.Event()  # the cluster's view is there, or will not be
        if cluster is not None:
            self._attached.set()

    def attach(self, cluster: ClusterCache | None, reporter: NodeReporter | None, note: str = "") -> None:
        """The cluster's view and writer, once the API client is made (agent/service.py), or
        ``note``: why there will be none."""
        self.cluster, self.reporter, self.cluster_note = cluster, reporter, note
        self._attached.set()

    def _await_cluster(self) -> None:
        """The first lists, until :attr:`sync_until` at most (then never again)."""
        until, self.sync_until = self.sync_until, None
        if until is None:
            return
        self._attached.wait(max(0.0, until - time.monotonic()))
        cluster = self.cluster
        if cluster is not None:
            cluster.wait_synced(max(0.0, until - time.monotonic()))

    # -- reading ---------------------------------------------------------------------------
    def collect_node(self) -> tuple[list[Collected], list[NotCollected]]:
        """The node's side, read-only, with the node's own binaries (``--host-root``)."""
        runner = Runner(self._host, Budget(self.opts.timeout))
        node = collect_node(runner, quiet, interval=0, second_snapshot=False, conntrack_entries=False)
        kp = collect_kube_proxy(runner, quiet, in_node_netns=not self._host.enter_netns, log_tail=self.opts.log_tail)
        self.proxy_running = kp.pid is not None
        got = [a for a in node.artifacts + kp.artifacts if isinstance(a, Collected)]
        for a in got:
            a.data = redact_secrets(a.path, a.data)
            a.source, a.stderr, a.note = redact_text(a.source), redact_text(a.stderr), redact_text(a.note)
        skipped = node.skipped + kp.skipped
        for s in skipped:  # reasons quote commands, an untrusted process's argv among them
            s.reason = redact_text(s.reason)
        return got, skipped

    def status(self) -> AgentStatus:
        """A copy of what the last cycle left (the HTTP handlers and the metrics read it while
        the next cycle runs)."""
        with self._lock:
            st = copy.copy(self._status)
            st.cycles, st.collection_errors = Counter(st.cycles), Counter(st.collection_errors)
            st.sources, st.stage_cpu = dict(st.sources), dict(st.stage_cpu)
            return st

    # -- schedule --------------------------------------------------------------------------
    def request(self) -> int:
        """Ask for a cycle soon; returns the number of the cycle that will answer."""
        with self._cv:
            st = self._status
            self._requested = st.cycle + (2 if st.running else 1)
            self._cv.notify_all()
            return self._requested

    def wait_for(self, cycle: int, timeout: float) -> bool:
        """Until cycle number ``cycle`` has finished."""
        with self._cv:
            return self._cv.wait_for(lambda: self._status.cycle >= cycle, timeout)

    def run(self, stop: threading.Event) -> None:
        """Cycles until ``stop`` is set."""
        if self.opts.nice:
            with contextlib.suppress(OSError):
                os.nice(self.opts.nice)
        while not stop.is_set():
            self.run_cycle()
            st = self._status
            took = st.last_wall or 0.0
            done = time.monotonic()
            spread = self.opts.interval * self.opts.jitter
            due = done + max(took, self.opts.interval + random.uniform(-spread, spread))
            earliest = done + took  # asked for: as soon as the last cycle's length has passed
            if self.recheck_at is not None:  # a change settling: read the node again once it has
                due = min(due, max(earliest, self.recheck_at))
            with self._cv:
                while not stop.is_set():
                    left = (earliest if self._requested > st.cycle else due) - time.monotonic()
                    if left <= 0:
                        break
                    self._cv.wait(min(left, 1.0))

    # -- one cycle -------------------------------------------------------------------------
    def run_cycle(self) -> Report | None:
        t0, cpu0 = time.monotonic(), _cpu()
        with self._cv:
            self._status.running = True
            self._status.last_start = t0
        report: Report | None = None
        error = ""
        # A cycle allocates millions of objects and frees them all at its end (refcounts, once the
        # facts let go of each other): the collector would scan the heap thousands of times for
        # nothing. It runs once in a while, after a cycle, on what the cycles keep.
        automatic = gc.isenabled()
        gc.disable()
        try:
            report = self._cycle()
        except Exception as e:  # a bug in a cycle: said, and the next cycle runs
            error = f"{type(e).__name__}: {e}"
            log.exception("cycle failed")
        finally:
            memo.clear()
            if automatic:
                gc.enable()
        with self._lock:
            n = self._status.cycle
        if n % self.opts.full_every == 0 or n < 2:
            gc.unfreeze()
            gc.collect()
            gc.freeze()  # what is alive now is kept across cycles: not scanned again until the next pass
        give_back_memory()
        wall, cpu = time.monotonic() - t0, _cpu() - cpu0
        with self._lock:
            staged = sum(self._status.stage_cpu.values())
            if report is not None and "cleanup" not in self._status.stage_cpu:
                self._status.stage_cpu["cleanup"] = round(max(0.0, cpu - staged), 3)  # freeing the cycle, a collection
        if report is not None:
            st = self._status
            named = "".join(f"; {f.code} {f.subject.get('service') or f.cause}" for f in st.findings[:5])
            log.info(
                "cycle %d: %.1fs, CPU %.2fs; %d finding(s), %d held back; cases: %d evaluated, %d carried over%s",
                st.cycle + 1, wall, cpu, len(st.findings), len(st.held), st.evaluated, st.reused, named,
            )  # fmt: skip
        with self._cv:
            st = self._status
            st.running = False
            st.cycle += 1
            st.durations.observe(wall)
            st.last_wall, st.last_cpu = wall, cpu
            if report is None:
                st.cycles["error"] += 1
                st.last_error = error
            else:
                st.cycles["error" if report.errors else "ok"] += 1
                st.last_success = time.time()
                st.last_error = "; ".join(f"{e.stage}: {e.error}" for e in report.errors)
            self._cv.notify_all()
        return report

    def _cycle(self) -> Report:
        c0, read_at = _cpu(), time.monotonic()
        artifacts, absent = self.collect()
        c1 = _cpu()
        now = [a for a in artifacts if a.path.startswith(COUNTERS)]
        rest = [a for a in artifacts if not a.path.startswith(COUNTERS)]
        # this reading is the last snapshot; the previous cycle's the first (none: the baseline)
        rest += [_snapshot(a, "T1") for a in now]
        rest += [_snapshot(a, "T0") for a in self._prev_counters]
        self._prev_counters = now
        errors: Counter[str] = Counter(a.path for a in artifacts if a.exit_code != 0)
        sources: dict[str, bool] = {}
        node_obj = None
        self._await_cluster()
        cluster = self.cluster
        if cluster is not None:
            got, missing = cluster.snapshot()
            rest += got
            absent += missing
            errors.update(m.path for m in missing)
            cluster_errors = cluster.errors()
            sources = {r.path: r.path not in cluster_errors for r in cluster.resources}
            node_obj = cluster.node_object()
        elif self.cluster_note:
            absent.append(NotCollected("cluster/", self.cluster_note))
        evidence = add_collected(Evidence(), rest, absent, node=self.node, collected_at=utc_now())
        with self._lock:
            n = self._status.cycle
        full = self._previous is None or self.opts.full_every <= 1 or n % self.opts.full_every == 0
        reuse = Reuse(self._previous, full=full)
        c2 = _cpu()
        run = pipeline(evidence, node=self.node, min_severity=self.opts.min_severity, reuse=reuse, free=False)
        c3 = _cpu()
        report, facts = run.report, run.facts
        self.gate.observe(_readings(facts), time.monotonic())
        mode = facts.running_mode.mode
        vars(facts).clear()  # its parts refer to it: let go of them now, not at a collection
        del run, facts
        self._previous = reuse.next if report.verification is not None else None
        shown, held = self._gated(report.visible(), read_at)
        self._tell(shown, report, node_obj)
        with self._lock:
            st = self._status
            st.report, st.findings, st.held, st.mode = report, shown, held, mode
            st.evaluated, st.reused, st.full = reuse.evaluated, reuse.reused, reuse.full
            st.collection_errors.update(errors)
            st.sources = sources
            st.condition = self.reporter_condition(shown, report)
            spent = {"collect": c1 - c0, "cluster": c2 - c1, "diagnose": c3 - c2, "report": _cpu() - c3}
            st.stage_cpu = {k: round(v, 3) for k, v in spent.items()}
        return report

    def _gated(self, findings: list[Finding], read_at: float) -> tuple[list[Finding], list[Finding]]:
        """A finding of a check that reads packet-loss counters is reported while one of those
        counters spikes (counters.py), or when the kernel's log says it happens (a timestamped
        line, not a total); otherwise it is held back, whatever settings or rules it also cites
        (the MASQUERADE rules without --random-fully beside conntrack's insert_failed total). What
        nothing explains, at low confidence, is held back too: it is for a reader of the report.
        A finding comparing the rules with the cluster (CheckSpec.settles) about a Service that
        changed less than ``settle`` seconds (:data:`SETTLE_SECONDS`) before the node was read
        (``read_at``) is held until the change settled, and the node read again then
        (:attr:`recheck_at`): kube-proxy may not have applied it yet (unless no kube-proxy runs at
        all). A change kube-proxy never applies is found by that cycle; a finding already
        reported stays reported through further changes."""
        shown, held = [], []
        self.recheck_at = None
        for f in findings:
            if f.cause in knowledge.UNEXPLAINED and f.confidence <= Confidence.LOW:
                held.append(f)  # a lead for a reader, not a node condition (or an Event)
                continue
            settles = self._settles(f, read_at)
            if settles is not None and finding_key(f) not in self._known:  # a reported one stays
                held.append(f)
                self.recheck_at = max(self.recheck_at or settles, settles)
                continue
            spec = knowledge.CHECKS.get(f.code)
            on_counters = spec is not None and spec.counters and not any(e.artifact == KERNEL_LOG for e in f.evidence)
            if on_counters and spec is not None and not self.gate.any_spiking(spec.counters):
                held.append(f)
            else:
                shown.append(f)
        return shown, held

    def _settles(self, f: Finding, read_at: float) -> float | None:
        """When the Service change behind ``f`` settles (monotonic), if it had not settled when the
        node was read; None otherwise. A finding naming no Service (several summed up) waits for
        the latest change to any Service."""
        spec = knowledge.CHECKS.get(f.code)
        if spec is None or not spec.settles or self.cluster is None or self.proxy_running is False:
            return None  # no kube-proxy runs: no change is on its way
        label = str(f.subject.get("service") or "")
        changed = self.cluster.changed_at(label.split(":", 1)[0] if label else None)
        if changed is None or changed <= read_at - self.opts.settle:
            return None
        return changed + self.opts.settle

    def reporter_condition(self, findings: list[Finding], report: Report) -> Condition:
        inconclusive = None
        if not findings and (report.checks_run == 0 or report.errors):
            inconclusive = "; ".join(f"{e.stage}: {e.error}" for e in report.errors) or "nothing could be checked"
        return condition_for(findings, inconclusive)

    def _tell(self, findings: list[Finding], report: Report, node_obj: dict[str, object] | None) -> None:
        """Events for what appeared and what went away, and the condition."""
        now = {finding_key(f): f for f in findings}
        if self.reporter is not None:
            self.reporter.begin(min(WRITE_SECONDS, max(2.0, self.opts.timeout / 4)))
            uid = None
            if node_obj is not None:
                meta = node_obj.get("metadata")
                uid = str(meta.get("uid")) if isinstance(meta, dict) and meta.get("uid") else None
            for key, f in now.items():
                if key not in self._known:
                    self.reporter.event("Warning", camel(f.cause), f"{f.code} {f.summary}", uid)
            for key, f in self._known.items():
                if key not in now:
                    self.reporter.event("Normal", camel(f.cause) + "Resolved", f"{f.code} resolved: {f.title}", uid)
            self.reporter.condition(self.reporter_condition(findings, report), node_obj)
        self._known = now


def _snapshot(a: Collected, snap: str) -> Collected:
    """A counter reading as snapshot ``snap`` (its path's ``T0`` replaced)."""
    rest = a.path[len(COUNTERS) :].split("/", 1)[-1]
    return Collected(
        f"{COUNTERS}{snap}/{rest}", a.data, a.source, a.exit_code, a.stderr, a.started_at, a.duration_ms, a.note,
        a.binary, a.binary_version,
    )  # fmt: skip


def _readings(facts: Facts) -> dict[str, int]:
    """The latest value of every counter a check names (counters.py compares them cycle to cycle)."""
    names = {c for spec in knowledge.CHECKS.values() for c in spec.counters}
    out = {}
    node = facts.node_state
    for name in names:
        s = node.total(name)
        if s is not None:
            out[name] = s.value
    return out

"""D10: a log that has been failing for days (a failure record every few lines) costs what a quiet
one does. The scan keeps a bounded sample per signature; counts, first and last hits, the sync
timeline and what the checks conclude stay exactly what reading every hit gives."""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import all_findings

import kpdoctor.checks  # noqa: F401  (registers every signature)
from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.facts.log import SYNC_COMPLETE, LogFacts
from kpdoctor.knowledge import read_by_checks
from kpdoctor.model import Report
from kpdoctor.parse import logscan
from kpdoctor.parse.logscan import Hit, Scanner, ScanResult, literal_prefixes
from kpdoctor.parse.logwrap import unwrap

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from gen_kubeproxy_log import generate

Diag = Callable[..., Report]


def scan(path: Path, workers: int = 1, pure_python: bool = False) -> ScanResult:
    return Scanner(read_by_checks(), workers=workers, pure_python=pure_python).scan(
        [Artifact(path.name, Kind.KUBE_PROXY_LOG, path=str(path))]
    )


def peak_scan_memory(path: Path) -> tuple[int, int]:
    """(peak bytes traced while scanning, hits counted)."""
    tracemalloc.start()
    try:
        res = scan(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, sum(res.counts.values())


@pytest.mark.slow
def test_memory_is_flat_in_log_size_and_error_density(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every hit used to be kept (about 700 bytes each, with its record): 21 MB traced for
    8 MB of this log, 41 MB for 16 MB. Now about 1.1 MB for either: the chunk being read and a
    bounded sample."""
    monkeypatch.setattr(logscan, "CHUNK_BYTES", 256 * 1024)  # so the chunk does not hide the hits
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    generate(small, 8, failure_every=4)
    generate(large, 16, failure_every=4)
    peak_small, hits_small = peak_scan_memory(small)
    peak_large, hits_large = peak_scan_memory(large)
    assert hits_large > 1.9 * hits_small > 40_000
    assert peak_large < 5 * 1024**2, peak_large
    assert peak_large < 1.25 * peak_small + 512 * 1024, (peak_small, peak_large)


# -- the sample against every hit -------------------------------------------------------------


def reference(path: Path) -> tuple[dict[str, list[tuple[int, int, str, tuple[str | None, ...]]]], list[int]]:
    """Every hit, read the slow way: per signature (line, offset, text, groups); and the start
    offset of every line."""
    hits: dict[str, list[tuple[int, int, str, tuple[str | None, ...]]]] = {}
    offsets = []
    off = 0
    data = path.read_bytes()
    for n, raw in enumerate(data.split(b"\n"), 1):
        offsets.append(off)
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        inner = unwrap(line).inner
        for sig in read_by_checks():
            if sig.needle in inner:
                m = sig.compiled().search(inner)
                if m:
                    hits.setdefault(sig.id, []).append((n, off, inner.strip(), m.groups()))
        off += len(raw) + 1
    return hits, offsets


def reference_timeline(hits: dict[str, list[tuple[int, int, str, tuple[str | None, ...]]]]) -> list[int]:
    """The successful syncs' offsets, as the scan before D10 worked them out from every hit."""
    failures = {s.id for s in read_by_checks() if s.failure}
    events = [(h[1], False) for sid in failures for h in hits.get(sid, [])]
    events += [(h[1], True) for sid in SYNC_COMPLETE.ids for h in hits.get(sid, [])]
    successes, failed = [], False
    for off, is_sync in sorted(events):
        if is_sync:
            if not failed:
                successes.append(off)
            failed = False
        else:
            failed = True
    return successes


def as_tuple(h: Hit) -> tuple[Any, ...]:
    return (h.sig, h.line, h.order, h.text, h.groups, h.header_line, h.timestamp, h.record, h.successes_before, h.success)


@pytest.fixture(scope="module")
def dense_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failure record every 3 lines, every kind of sparse error every 400 lines, then the real
    kube-proxy logs of tests/data (wrapped lines, panics, both klog eras) twice over."""
    import gen_kubeproxy_log

    path = tmp_path_factory.mktemp("dense") / "dense.log"
    every = gen_kubeproxy_log.ERROR_EVERY
    gen_kubeproxy_log.ERROR_EVERY = 400
    try:
        generate(path, 3, failure_every=3)
    finally:
        gen_kubeproxy_log.ERROR_EVERY = every
    real = sorted((Path(__file__).parent / "data" / "logs").glob("*.log"))
    with open(path, "a", encoding="utf-8") as fh:
        for _ in range(2):
            for p in real:
                fh.write(p.read_text(encoding="utf-8").rstrip("\n") + "\n")
    return path


def test_counts_first_last_and_timeline_match_every_hit(dense_log: Path) -> None:
    ref, _ = reference(dense_log)
    res = scan(dense_log)
    log = LogFacts(res)
    successes = reference_timeline(ref)
    assert {k: len(v) for k, v in ref.items()} == res.counts
    assert len(res.counts) >= 30 and sum(res.counts.values()) > 10_000
    for sid, every in ref.items():
        sample = log.hits(sid)
        assert len(sample) <= logscan.SAMPLE_FIRST + logscan.SAMPLE_LAST + 2 * len(res.samples[sid].variants)
        assert {(h.line, h.text, tuple(h.groups)) for h in sample} <= {(n, t, g) for n, _, t, g in every}
        for kept, true in ((sample[0], every[0]), (sample[-1], every[-1])):
            assert (kept.line, kept.order[1], kept.text, kept.groups) == true, sid
        occ = log.occurrence(sample)
        assert occ is not None and occ.count == len(every)
        # ongoing: the last hit after the last successful sync
        assert log.ongoing(sample) == (every[-1][1] > successes[-1]), sid
        first, last = sample[0], sample[-1]
        between = any(first.order[1] < s < last.order[1] for s in successes)
        assert log.successes_between(first, last) == between, sid
        assert log.successes_after_count(last) == sum(1 for s in successes if s > last.order[1]), sid
        for h in sample:  # each kept hit knows how many syncs succeeded before it
            assert h.successes_before == sum(1 for s in successes if s < h.order[1])
    assert log.last_success == (0, successes[-1])
    assert res.timeline.successes == len(successes)


def test_variants_keep_the_first_and_last_of_each_group_value(dense_log: Path) -> None:
    """Questions about one group value (the node looked up, a flag, the chain) find their hits."""
    ref, _ = reference(dense_log)
    log = LogFacts(scan(dense_log))
    keyed = {s.id for s in read_by_checks() if s.keyed}  # not a sync's duration, not a payload
    for sid, every in ref.items():
        if sid not in keyed:
            continue
        sample = log.hits(sid)
        for groups in {g for *_, g in every}:
            with_value = [h for h in every if h[3] == groups]
            kept = [h for h in sample if tuple(h.groups) == groups]
            assert kept and (kept[0].line, kept[-1].line) == (with_value[0][0], with_value[-1][0]), (sid, groups)


@pytest.mark.parametrize(
    ("workers", "chunk", "pure"), [(1, 64 * 1024, False), (2, 64 * 1024, False), (2, 300 * 1024, True)]
)
def test_serial_parallel_and_chunking_keep_the_same_sample(
    monkeypatch: pytest.MonkeyPatch, dense_log: Path, workers: int, chunk: int, pure: bool
) -> None:
    """Ranges scanned apart are stitched: line numbers, the sync timeline (a range's first sync
    may follow a failure in the range before), start-up vs running variants."""
    whole = scan(dense_log)
    monkeypatch.setattr(logscan, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(logscan, "PARALLEL_MIN_BYTES", 1024 * 1024)
    parts = scan(dense_log, workers=workers, pure_python=pure)
    assert parts.counts == whole.counts and parts.timeline.successes == whole.timeline.successes
    assert parts.timeline.last_success == whole.timeline.last_success
    assert parts.lines == whole.lines
    for sid in whole.samples:
        assert [as_tuple(h) for h in parts.samples[sid].hits()] == [as_tuple(h) for h in whole.samples[sid].hits()]
        assert parts.samples[sid].variants.keys() == whole.samples[sid].variants.keys()


def test_a_range_whose_first_sync_follows_an_earlier_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The first sync-complete line of a range is not a success when the range before ended in a
    failure: stitching takes it back (and one success from every hit after it)."""
    fail = 'E1113 16:00:00.000000       1 proxier.go:858] "Sync failed" retryingTime="30s"\n'
    ok = 'I1113 16:00:01.000000       1 proxier.go:820] "SyncProxyRules complete" elapsed="1ms"\n'
    noise = 'I1113 16:00:02.000000       1 config.go:133] "Calling handler.OnEndpointSliceUpdate"\n'
    text = (noise * 3000 + fail + noise * 3000 + ok + noise * 100 + fail + ok + ok + noise * 3000) * 3
    path = tmp_path / "k.log"
    path.write_text(text)
    whole = scan(path)
    monkeypatch.setattr(logscan, "CHUNK_BYTES", 32 * 1024)
    monkeypatch.setattr(logscan, "PARALLEL_MIN_BYTES", 64 * 1024)
    parts = scan(path, workers=2)
    assert whole.timeline.successes == 3  # the second "complete" after each failure
    assert (parts.timeline.successes, parts.timeline.last_success) == (3, whole.timeline.last_success)
    for sid in whole.samples:
        assert [as_tuple(h) for h in parts.samples[sid].hits()] == [as_tuple(h) for h in whole.samples[sid].hits()]


def test_past_the_variant_limit_hits_are_counted_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logscan, "MAX_VARIANTS", 3)
    text = "".join(f'I1113 16:00:0{i % 10}.000000       1 flags.go:64] FLAG: --flag-{i}="{i}"\n' for i in range(40))
    res = Scanner(read_by_checks(), workers=1).scan([Artifact("f.log", Kind.KUBE_PROXY_LOG, text=text)])
    sample = res.samples["flag"]
    assert sample.count == 40 and len(sample.variants) == 3 and sample.untracked == 37
    hits = sample.hits()
    assert (hits[0].line, hits[-1].line) == (1, 40)


def test_literal_prefixes() -> None:
    assert literal_prefixes(r"ip6tables|-restore v[0-9.]+ *(?:\((?:legacy|nf_tables)\))?") == ("ip6tables", "-restore v")
    assert literal_prefixes("ab*c|de") == ("a", "de")
    assert literal_prefixes("[ab]c") is None and literal_prefixes("x|(y)") is None


# -- what the checks conclude is read from the sample ---------------------------------------

RESTORE_V4 = (
    'E1113 16:{s:02d}:00.000000       1 proxier.go:1481] "Failed to execute iptables-restore" err=<\n'
    '\texit status 2: iptables-restore v1.8.4 (legacy): unknown option "--xor-mark"\n'
    "\tError occurred at line: 16\n >\n"
)
RESTORE_V6 = RESTORE_V4.replace("iptables-restore v", "ip6tables-restore v")
SYNCED = 'I1113 16:{s:02d}:01.000000       1 proxier.go:820] "SyncProxyRules complete" elapsed="22ms"\n'


def test_one_ipv6_failure_among_hundreds_is_still_seen(diagnose: Diag) -> None:
    """KP114 says "only the IPv6 path" when any failing record is ip6tables-restore's: one in
    the middle of 600 IPv4 ones is kept (a variant of its own), not sampled away."""
    log = "".join(RESTORE_V4.format(s=i % 60) for i in range(300))
    log += RESTORE_V6.format(s=7) + "".join(RESTORE_V4.format(s=i % 60) for i in range(300))
    [f] = [f for f in all_findings(diagnose({"kp.log": log})) if f.code == "KP114"]
    assert f.occurrences == 601 and "Only the IPv6 path" in f.summary
    v4_only = "".join(RESTORE_V4.format(s=i % 60) for i in range(601))
    [g] = [f for f in all_findings(diagnose({"kp.log": v4_only})) if f.code == "KP114"]
    assert "IPv6" not in g.summary


def test_every_failure_ipv6_while_ipv4_syncs_succeed(diagnose: Diag) -> None:
    """KP100's dual-stack reading needs *every* restore failure to be IPv6 and a success between
    the first and the last: both exact however many there are."""
    log = "".join(RESTORE_V6.format(s=i % 60) + SYNCED.format(s=i % 60) * 3 for i in range(400))
    [f] = [f for f in all_findings(diagnose({"kp.log": log})) if f.code == "KP100"]
    assert f.occurrences == 400 and "Every failure is IPv6" in f.summary and "recovered" in f.summary
    mixed = log + RESTORE_V4.format(s=5) + log
    [g] = [f for f in all_findings(diagnose({"kp.log": mixed})) if f.code == "KP100"]
    assert g.occurrences == 801 and "IPv6" not in g.summary


def test_crash_loop_cites_the_last_panic_before_the_first_sync(diagnose: Diag) -> None:
    """KP106 reads the panics before an artifact's first sync: the last of those is kept (the
    start-up variant) even with hundreds of panics after it."""
    panic = (
        "I0401 09:00:00.000000       1 server_others.go:259] Using ipvs Proxier.\n"
        "panic: runtime error: invalid memory address or nil pointer dereference\n"
        "[signal SIGSEGV: segmentation violation code=0x1 addr=0x50 pc=0x1514fb8]\n\n"
        "goroutine 1 [running]:\n"
        "k8s.io/kubernetes/pkg/proxy/ipvs.(*Proxier).syncProxyRules(0xc0001b2000)\n"
    )
    before, after = panic * 40, panic * 200
    log = before + SYNCED.format(s=1) + after
    [f] = [f for f in all_findings(diagnose({"kp.log": log})) if f.code == "KP106"]
    panic_lines = [n for n, line in enumerate(log.splitlines(), 1) if line.startswith("panic:")]
    cited = {c.line for c in f.evidence if c.text.startswith("panic:")}
    assert cited == {panic_lines[0], panic_lines[39]}


def test_a_line_without_end_is_scanned_in_bounded_memory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A file whose last line never ends (a binary dump, a runaway write) was carried on whole
    until the end of the file: memory grew with it (a 300 MB line: 200 MB per worker). Now it is
    read in chunk-sized pieces, and the records before it are still found."""
    monkeypatch.setattr(logscan, "CHUNK_BYTES", 256 * 1024)
    path = tmp_path / "kube-proxy.log"
    with open(path, "wb") as fh:
        fh.write(b'E1113 16:15:07.931291       1 proxier.go:1481] "Failed to execute iptables-restore" err="exit status 1"\n')
        fh.write(b"E1113 16:15:08.931291       1 proxier.go:1481] " + b"a" * 16 * 1024**2)
    peak, hits = peak_scan_memory(path)
    assert hits >= 1
    assert peak < 4 * 1024**2, peak

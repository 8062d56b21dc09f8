"""The log scanner finds signatures in every wrapping kube-proxy lines reach users in."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SEED3_BLOCK

import kpdoctor.checks  # noqa: F401  (registers every signature)
from kpdoctor.bundle.artifacts import Artifact, Kind
from kpdoctor.facts.log import RESTORE_FAILED, SYNC_COMPLETE, SYNC_FAILED
from kpdoctor.knowledge import REGISTRY, Messages, read_by_checks
from kpdoctor.parse import logscan
from kpdoctor.parse.logscan import Scanner
from kpdoctor.parse.logwrap import unwrap


def scan_text(text: str, name: str = "log") -> logscan.ScanResult:
    return Scanner(read_by_checks()).scan([Artifact(name, Kind.KUBE_PROXY_LOG, text=text)])


def count(res: logscan.ScanResult, reading: Messages) -> int:
    """Lines of any form of the reading's messages."""
    return sum(res.counts.get(i, 0) for i in reading.ids)


def test_multiline_err_block_hit_carries_its_record_header() -> None:
    res = scan_text(SEED3_BLOCK)
    [hit] = res.hits["mark-unknown-option"]
    assert hit.line == 3
    assert hit.header_line == 2
    assert hit.level == "E"
    assert hit.timestamp == "11-13T16:15:07.931291"
    assert hit.groups[0] == "xor-mark"
    assert count(res, SYNC_FAILED) == 1 and count(res, RESTORE_FAILED) == 1


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "2019-10-23T20:56:35.955254605Z stderr F ",
        "2023-11-13T16:15:07.931291015Z ",
        "[pod/kube-proxy-x7k2p/kube-proxy] ",
        "[pod/kube-proxy-x7k2p/kube-proxy] 2023-11-13T16:15:07.931291015Z ",
        "Nov 13 16:15:07 node3 kube-proxy[145725]: ",
        "nov 13 16:15:07 node3 kube-proxy[145725]: ",  # French/Spanish lower-case month
        "Nov. 13 16:15:07 node3 kube-proxy[145725]: ",
        "11月 13 16:15:07 node3 kube-proxy[145725]: ",
        "2023-11-13T16:15:07+0100 node3 k3s[1234]: ",
        "Nov 13 16:15:07 node3 rke2[88]: ",
    ],
)
def test_every_wrapper_is_unwrapped(prefix: str) -> None:
    text = "".join(prefix + line + "\n" for line in SEED3_BLOCK.splitlines())
    res = scan_text(text)
    [hit] = res.hits["mark-unknown-option"]
    assert hit.header_line == 2 and hit.line == 3
    assert hit.level == "E"
    assert hit.text.startswith("exit status 2: ip6tables-restore")
    if "2023-11-13T" in prefix or "2019" in prefix:
        assert hit.timestamp is not None and hit.timestamp[:4] in ("2023", "2019")


def test_glog_era_single_line_and_line_numbers_across_chunks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    noise = "I1008 21:01:54.000000  145725 config.go:131] Calling handler.OnEndpointsUpdate\n"
    err = (
        "E1008 21:01:55.367127  145725 proxier.go:1285] Failed to execute iptables-restore: exit status 2 "
        "(iptables-restore v1.8.4 (legacy): Couldn't load target `KUBE-MARK-DROP':No such file or directory\n"
    )
    lines = [noise] * 5000 + [err] + [noise] * 3000 + [SEED3_BLOCK] + [noise] * 10
    p = tmp_path / "big.log"
    p.write_text("".join(lines))
    monkeypatch.setattr(logscan, "CHUNK_BYTES", 4096)  # many chunk boundaries, some inside records
    res = Scanner(read_by_checks()).scan([Artifact("big.log", Kind.KUBE_PROXY_LOG, path=str(p))])
    [target] = res.hits["restore-cannot-load-kube-target"]
    assert target.line == 5001 and target.groups[1:] == ("legacy", "KUBE-MARK-DROP")
    [mark] = res.hits["mark-unknown-option"]
    assert mark.line == 5001 + 3000 + 3 and mark.header_line == mark.line - 1
    assert count(res, RESTORE_FAILED) == 2


def test_unwrap_keeps_klog_header_intact() -> None:
    u = unwrap("Oct 08 21:01:55 node3 kube-proxy[145725]: E1008 21:01:55.367127  145725 proxier.go:1285] x")
    assert u.inner.startswith("E1008 21:01:55.367127") and u.ident == "kube-proxy"


def test_sync_complete_matches_both_eras() -> None:
    res = scan_text(
        "I0111 06:51:48.874607       1 proxier.go:790] syncProxyRules took 12.3ms\n"
        'I1113 16:15:07.931317       1 proxier.go:820] "SyncProxyRules complete" elapsed="22.67239ms"\n'
    )
    assert count(res, SYNC_COMPLETE) == 2


def test_every_signature_is_grep_compatible() -> None:
    """bench/ runs the same patterns with grep -E: no Python-only syntax."""
    for sig in REGISTRY.values():
        for bad in ("(?", "\\d", "\\s", "\\w", "\\b", "*?", "+?"):
            assert bad not in sig.pattern, (sig.id, bad)
        assert sig.needle in sig.pattern.replace("\\", ""), sig.id


@pytest.mark.parametrize("workers", [1, 2])
def test_compiled_and_pure_python_finders_agree(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, workers: int) -> None:
    """The Aho-Corasick finder, the pure-Python fallback, serial and parallel: same hits."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from gen_kubeproxy_log import generate

    log = tmp_path / "gen.log"
    generate(log, 3)
    monkeypatch.setattr(logscan, "CHUNK_BYTES", 64 * 1024)
    monkeypatch.setattr(logscan, "PARALLEL_MIN_BYTES", 1024 * 1024)
    art = Artifact("gen.log", Kind.KUBE_PROXY_LOG, path=str(log))
    results = []
    for pure in (False, True):
        res = Scanner(read_by_checks(), workers=workers, pure_python=pure).scan([art])
        results.append(
            (
                sorted((h.sig, h.line, h.header_line, h.order, h.text) for hs in res.hits.values() for h in hs),
                res.counts,
            )
        )
    assert results[0] == results[1]
    serial = Scanner(read_by_checks(), workers=1).scan([art])
    assert results[0][1] == serial.counts and sum(serial.counts.values()) > 50
    # line numbers are the file's own
    lines = log.read_text().splitlines()
    for sig, line, _h, _o, text in results[0][0]:
        assert lines[line - 1].strip() == text, sig

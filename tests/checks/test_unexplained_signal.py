"""KP140 and the verdict: an error line, a node tool's error, a kernel failure or a loss counter
that nothing known explains is reported (never dropped), a root cause folds it, and a run says
"healthy" only when every family of causes could be checked and nothing is left unexplained."""

from __future__ import annotations

import random
from pathlib import Path

from checks.helpers import bundle, conntrack_s, run
from conftest import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kpdoctor.checks.unexplained import CAUSE
from kpdoctor.diagnose import diagnose_paths, exit_code
from kpdoctor.messages import catalogue
from kpdoctor.messages.templates import render
from kpdoctor.model import Finding, Report, Severity
from kpdoctor.report.view import verdict

HEALTHY = DATA / "logs" / "healthy-glog-era-2.log"
GLOG = "E1204 15:32:28.551729       1 proxier.go:1229] {text}"


def _every(findings: list[Finding]) -> list[Finding]:
    out = []
    for f in findings:
        out.append(f)
        out += _every(f.folded)
    return out


def _unexplained(report: Report) -> list[Finding]:
    return [f for f in _every(report.findings) if f.cause == CAUSE]


def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def test_an_error_line_nothing_knows_is_reported_not_dropped(tmp_path: Path) -> None:
    # a kube-proxy E-line of a wording no release printed: no check, no catalogue message reads it
    line = 'E1204 15:32:29.100000       1 proxier.go:900] "Frobnicating the widget failed" err="quux"'
    log = HEALTHY.read_text() + line + "\n"
    rep = run([_write(tmp_path, "kube-proxy.log", log)])
    found = _unexplained(rep)
    assert len(found) == 1 and found[0].code == "KP140", [f"{f.code} {f.summary}" for f in rep.findings]
    f = found[0]
    assert f.severity == Severity.INFO and "Frobnicating the widget failed" in f.summary
    assert f.evidence[0].line == len(log.splitlines()) and f.fix  # cited, with what to send next
    at_default = diagnose_paths([tmp_path / "kube-proxy.log"])[0]  # the default threshold: warning
    assert verdict(at_default).word == "nothing found in what was given" and exit_code(at_default) == 0


def test_a_recurring_error_at_the_end_of_the_log_is_a_warning_while_ongoing(tmp_path: Path) -> None:
    line = 'E1204 15:{m:02d}:29.100000       1 proxier.go:900] "Frobnicating the widget failed" err="quux {m}"\n'
    body = HEALTHY.read_text() + "".join(line.format(m=m) for m in range(30, 60))
    rep = run([_write(tmp_path, "kube-proxy.log", body)])
    (f,) = _unexplained(rep)
    assert f.ongoing is True and f.severity == Severity.WARNING and f.occurrences == 30
    assert f.first_seen != f.last_seen


def test_a_node_tools_error_and_a_kernel_failure_are_signals(tmp_path: Path) -> None:
    # written here the way the tools print (iptables 1.8's banner, the kernel's bracketed time),
    # pasted below a kube-proxy log
    paste = (
        "iptables v1.8.7 (nf_tables): frobnication of rule 3 in chain KUBE-SVC-FROB refused\n"
        "[ 8123.456789] nf_conntrack: frobnication of the helper failed\n"
    )
    p = _write(tmp_path, "paste.txt", HEALTHY.read_text() + paste)
    rep = run([p])
    n = len(HEALTHY.read_text().splitlines())
    cited = {c.line for f in _every(rep.findings) for c in f.evidence if c.artifact == str(p)}
    assert {n + 1, n + 2} <= cited  # each explained (iptables' banner: KP130) or reported (KP140)
    assert any("kernel" in f.title for f in _unexplained(rep))


def test_another_components_errors_are_not_kube_proxys_signals(tmp_path: Path) -> None:
    # Calico's own format: its errors belong to the CNI, not to the Service path kpdoctor checks
    log = "2018-09-07 08:02:59.942 [ERROR][15833] table.go 778: Frobnication failed error=exit status 4\n"
    rep = run([_write(tmp_path, "felix.log", log)])
    assert _unexplained(rep) == []


def test_a_root_cause_folds_what_nothing_explains(tmp_path: Path) -> None:
    log = (DATA / "logs" / "iptables-backend-mismatch.log").read_text()
    log += 'E1204 15:32:29.100000       1 proxier.go:900] "Frobnicating the widget failed" err="quux"\n'
    rep = run([_write(tmp_path, "kube-proxy.log", log)])
    assert rep.findings[0].cause == "iptables-backend-mismatch"
    assert all(f.cause != CAUSE for f in rep.findings)  # not at the top level...
    assert _unexplained(rep)  # ...but kept, under the root cause


def test_loss_counters_no_check_reads_are_reported_when_they_grow(tmp_path: Path) -> None:
    t0 = "TcpInSegs 100000\nTcpExtTCPBacklogDrop 10\nIpInReceives 200000\nIpInDiscards 0\n"
    t1 = "TcpInSegs 100500\nTcpExtTCPBacklogDrop 90\nIpInReceives 200700\nIpInDiscards 0\n"
    root = bundle(
        tmp_path,
        {"node/counters/T0/nstat.txt": t0, "node/counters/T1/nstat.txt": t1},
        {"T0": "2024-01-01T00:00:00Z", "T1": "2024-01-01T00:00:10Z"},
    )
    rep = run([root])
    (f,) = _unexplained(rep)
    assert f.severity == Severity.WARNING and f.ongoing and "TcpExtTCPBacklogDrop" in f.summary
    assert "IpInDiscards" not in f.summary


def test_counters_a_check_reads_are_left_to_it(tmp_path: Path) -> None:
    root = bundle(tmp_path, {"node/counters/T0/conntrack-stats.txt": conntrack_s(500, drop=20)})
    rep = run([root])
    assert _unexplained(rep) == []
    assert any(f.cause == "conntrack-insert-race" for f in _every(rep.findings))


def test_a_single_listing_is_not_a_clean_bill_of_health(tmp_path: Path) -> None:
    rep = diagnose_paths([DATA / "iptables" / "real" / "legacy-S.txt"])[0]
    v = verdict(rep)
    assert v.code == 0 and v.word == "nothing found in what was given", v
    assert rep.coverage is not None and rep.coverage.not_ruled_out() and rep.coverage.send
    assert "not ruled out" in v.why and "checks could run" in v.why


def test_a_suspected_cause_names_what_decides_it(tmp_path: Path) -> None:
    log = (DATA / "logs" / "healthy-glog-era-5-ipvs.log").read_text()
    rep = run([_write(tmp_path, "kube-proxy.log", log)])
    sus = [f for f in _every(rep.findings) if f.suspected]
    assert sus and all(f.decided_by for f in sus if f.code == "KP103"), [(f.code, f.decided_by) for f in sus]
    assert any("iptables-restore --version" in c for f in sus for c in f.decided_by)
    assert rep.to_json()["coverage"]["suspected"] >= 1
    assert "decided_by" in next(f.to_json() for f in sus if f.code == "KP103")


# -- the property: no catalogue error line leaves a healthy log looking healthy ----------------

ERRORS = sorted(
    (m for m in catalogue() if m.kind != "benign" and (m.component != "kube-proxy" or m.level in ("E", "F"))),
    key=lambda m: m.key,
)


def _line_of(m: object) -> str:
    from kpdoctor.messages.schema import Message

    assert isinstance(m, Message)
    text = render(m.template)
    if m.component == "kernel":
        return f"[ 8123.456789] {text}"
    if m.component == "kube-proxy":
        return GLOG.format(text=text)
    return text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(min_value=0, max_value=len(ERRORS) - 1), where=st.floats(min_value=0, max_value=1))
def test_every_catalogue_error_line_is_explained_or_reported(tmp_path: Path, index: int, where: float) -> None:
    m = ERRORS[index]
    healthy = HEALTHY.read_text().splitlines()
    at = int(where * len(healthy))
    line = _line_of(m)
    lines = [*healthy[:at], line, *healthy[at:]]
    p = tmp_path / f"kp-{random.randrange(10**9)}.log"
    p.write_text("\n".join(lines) + "\n")
    rep = run([p])
    assert verdict(rep).word != "healthy", (m.key, line)
    every = _every(rep.findings)
    cited = {(c.artifact, c.line) for f in every for c in f.evidence}
    texts = {c.text for f in every for c in f.evidence}
    assert (str(p), at + 1) in cited or any(line.strip() in t or t in line for t in texts), (
        m.key,
        line,
        [(f.code, f.cause, [c.text for c in f.evidence]) for f in every],
    )


def test_checks_that_read_only_a_fragment_rule_nothing_out(tmp_path: Path) -> None:
    """A client's error pasted alone is read as log lines: the sync checks run on it, but a few
    lines without their log cannot say kube-proxy syncs well, so sync failures stay open."""
    p = _write(
        tmp_path,
        "curl.txt",
        "curl: (7) Failed to connect to 10.96.12.7 port 8080 after 3 ms: Couldn't connect to server\n",
    )
    rep = diagnose_paths([p])[0]
    assert rep.coverage is not None and rep.checks_run > 0
    assert "rule sync failures" in rep.coverage.not_ruled_out()
    whole = diagnose_paths([DATA / "logs" / "healthy-structured-era-2.log"])[0]
    assert whole.coverage is not None and "rule sync failures" not in whole.coverage.not_ruled_out()


def test_a_large_logs_unknown_error_is_found_where_it_is(tmp_path: Path) -> None:
    """A log past the size read line by line (2 MB: then it is scanned for its levelled lines):
    the unknown error line is reported with the line number it has in the file, ongoing when it
    repeats in the log's latest part, as in a short paste."""
    LARGE = 2_000_000
    healthy = HEALTHY.read_text().splitlines()
    lines: list[str] = []
    while sum(len(x) + 1 for x in lines) < LARGE + 200_000:
        lines += healthy
    unknown = GLOG.format(text="Failed to frobnicate the flux capacitor: device busy")
    at = [len(lines) // 3, len(lines) - 5]
    for n in sorted(at, reverse=True):
        lines.insert(n, unknown)
    big = _write(tmp_path, "kube-proxy.log", "\n".join(lines) + "\n")
    assert big.stat().st_size >= LARGE
    report, _ = diagnose_paths([big])
    [f] = [
        f for f in _unexplained(report) if "frobnicate" in f.summary or any("frobnicate" in e.text for e in f.evidence)
    ]
    cited = sorted(e.line for e in f.evidence if "frobnicate" in e.text)
    assert cited == [at[0] + 1, at[1] + 2]  # 1-based, the second one after the first was inserted
    assert f.occurrences == 2 and f.ongoing

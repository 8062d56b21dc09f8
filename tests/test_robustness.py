"""Honest on broken input (robustness defects D3-D5, D9, D13, D14, D16, D20-D22): each test runs
the real command line the way the defect's reproduction did, and holds it to what a user relies
on: the documented exit codes, a one-line reason, the rest of the report, no hang, no raw escape
sequence, valid UTF-8 JSON, and evidence that parses to nothing never reported as clean.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from conftest import DATA, MISMATCH

from kpdoctor import deadline, knowledge
from kpdoctor.demo import demo_path
from kpdoctor.diagnose import diagnose_paths, exit_code
from kpdoctor.model import InputProblem, group_problems
from kpdoctor.parse.iptables import parse_save
from kpdoctor.parse.k8s import parse_objects
from kpdoctor.parse.kpconfig import parse_duration, read_cmdline

XTABLES_LOG = DATA / "logs" / "xtables-lock.log"
IP_LINK = DATA / "node" / "ip-j-link.json"


def kpdoctor(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """The installed command line, as a user runs it (its own process: signals, stdin, exit)."""
    env = {k: v for k, v in os.environ.items() if k != "KPDOCTOR_DEBUG"}
    return subprocess.run(
        [sys.executable, "-m", "kpdoctor", *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=timeout,
        env=env,
    )


def report(res: subprocess.CompletedProcess[bytes]) -> dict[str, object]:
    return json.loads(res.stdout.decode("utf-8"))  # strict: the JSON must be valid UTF-8


# -- D4: evidence that parses to nothing ---------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [
        {"apiVersion": "v1", "kind": "List", "items": []},
        {"kind": "PodList", "items": []},
        {"apiVersion": "v1", "kind": "List", "items": None},
    ],
    ids=["empty List", "empty PodList", "items null"],
)
def test_an_empty_object_list_is_an_input_problem_not_a_clean_run(tmp_path: Path, doc: object) -> None:
    p = tmp_path / "empty.json"
    p.write_text(json.dumps(doc))
    res = kpdoctor("diagnose", "-f", "json", str(p))
    assert res.returncode == 3, res.stderr  # inconclusive, never 0
    r = report(res)
    assert r["checks_run"] == 0
    problems = [q["message"] for q in r["input_problems"]]  # type: ignore[union-attr]
    assert any("recognised as Kubernetes objects, but it holds no object" in m for m in problems), problems


def test_a_json_file_with_a_byte_order_mark_reads_like_without(tmp_path: Path) -> None:
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + IP_LINK.read_bytes())
    plain, marked = kpdoctor("diagnose", "-f", "json", str(IP_LINK)), kpdoctor("diagnose", "-f", "json", str(bom))
    assert plain.returncode == marked.returncode == 1
    assert [f["code"] for f in report(plain)["findings"]] == [f["code"] for f in report(marked)["findings"]]  # type: ignore[index, union-attr]


def test_utf16_evidence_from_powershell_is_read(tmp_path: Path) -> None:
    p = tmp_path / "kp.log"
    p.write_bytes(b"\xff\xfe" + MISMATCH.encode("utf-16-le"))
    res = kpdoctor("diagnose", "-f", "json", str(p))
    assert res.returncode == 1 and report(res)["findings"][0]["code"] == "KP101"  # type: ignore[index]


# -- D5: nesting -----------------------------------------------------------------------------------


def test_deep_json_is_a_problem_and_the_good_file_beside_it_is_still_diagnosed(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 1000 + "]" * 1000)
    res = kpdoctor("diagnose", "-f", "json", str(XTABLES_LOG), str(deep))
    assert res.returncode == 1, res.stderr
    r = report(res)
    assert r["findings"] and not r["internal_errors"]
    assert any("nested too deeply" in q["message"] for q in r["input_problems"])  # type: ignore[union-attr]


def test_deep_yaml_is_refused_at_once(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("apiVersion: v1\nkind: List\nitems: " + "[" * 20000 + "]" * 20000 + "\n")
    t0 = time.monotonic()
    res = kpdoctor("diagnose", "-f", "json", str(deep), str(XTABLES_LOG))
    assert time.monotonic() - t0 < 15
    assert res.returncode == 1, res.stderr
    assert any("nested more than" in q["message"] for q in report(res)["input_problems"])  # type: ignore[union-attr]


def test_a_deeply_nested_manifest_types_the_bundle_by_path(tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(demo_path("config-ignores-hostname"), b)
    (b / "manifest.json").write_text("[" * 5000 + "]" * 5000)
    res = kpdoctor("diagnose", "-f", "json", str(b))
    assert res.returncode == 1, res.stderr
    r = report(res)
    assert r["findings"][0]["code"] == "KP112"  # type: ignore[index]
    assert any("manifest.json" in q["source"] for q in r["input_problems"])  # type: ignore[union-attr]


# -- D3 (bundle side): the manifest says what must have arrived ---------------------------------


def test_a_bundle_missing_what_its_manifest_lists_says_so(tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(demo_path("kernel-mark-regression"), b)
    doc = json.loads((b / "manifest.json").read_text())
    for entry in doc["artifacts"]:  # as `kpdoctor collect` writes them: with their sizes
        entry["bytes"] = (b / entry["path"]).stat().st_size
    (b / "manifest.json").write_text(json.dumps(doc))
    (b / "cluster" / "nodes.json").unlink()
    text = (b / "kube-proxy" / "log.txt").read_text()
    (b / "kube-proxy" / "log.txt").write_text(text[: len(text) // 2])
    res = kpdoctor("diagnose", "-f", "json", str(b))
    by_source = {q["source"]: q["message"] for q in report(res)["input_problems"]}  # type: ignore[union-attr]
    assert "missing" in by_source["cluster/nodes.json"]
    assert "the manifest says" in by_source["kube-proxy/log.txt"]
    assert res.returncode != 0  # damaged evidence is never a clean run


def test_damaged_evidence_with_nothing_found_is_inconclusive(tmp_path: Path) -> None:
    b = tmp_path / "b"
    (b / "node").mkdir(parents=True)
    (b / "node" / "uname.txt").write_text("Linux n1 5.15.0-1 #1 SMP x86_64 GNU/Linux\n")
    manifest = {"node": "n1", "artifacts": [{"path": "node/uname.txt"}, {"path": "kube-proxy/log.txt"}]}
    (b / "manifest.json").write_text(json.dumps(manifest))
    res = kpdoctor("diagnose", "-f", "json", str(b))
    assert res.returncode == 3, res.stderr
    assert b"inconclusive: damaged evidence" in res.stderr


def test_archive_damage_reported_by_the_archive_reader_reaches_the_report(tmp_path: Path) -> None:
    """A tar.gz cut in the middle: what arrived is used, what did not is named."""
    good = io.BytesIO()
    with tarfile.open(fileobj=good, mode="w:gz") as tf:
        tf.add(demo_path("kernel-mark-regression"), arcname="b")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.getvalue()[: len(good.getvalue()) * 2 // 3])
    res = kpdoctor("diagnose", "-f", "json", str(cut))
    assert res.returncode != 0, res.stderr
    assert report(res)["input_problems"]


# -- D9, D16, D22: paths that are not files -------------------------------------------------------


def test_a_named_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    res = kpdoctor("diagnose", "-f", "json", str(fifo), str(XTABLES_LOG), timeout=30)
    assert time.monotonic() - t0 < 20 and res.returncode == 1
    problems = {q["source"]: q["message"] for q in report(res)["input_problems"]}  # type: ignore[union-attr]
    assert problems[str(fifo)].startswith("a named pipe (FIFO): refused without opening it")


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_refused_in_one_line(dev: str) -> None:
    res = kpdoctor("diagnose", dev, timeout=30)
    assert res.returncode == 2
    lines = res.stderr.decode().splitlines()
    assert lines[0] == f"kpdoctor: {dev}: a device, not a file: refused without opening it" + (
        " (to read a command's output, pipe it: `... | kpdoctor diagnose -`)"
    )


def test_stdin_dash_reads_pasted_evidence() -> None:
    res = kpdoctor("diagnose", "-f", "json", "-", stdin=XTABLES_LOG.read_bytes())
    assert res.returncode == 1, res.stderr
    r = report(res)
    assert r["findings"] and all(e["artifact"] == "stdin" for e in r["findings"][0]["evidence"])  # type: ignore[index]


def test_a_pipe_as_dev_stdin_and_process_substitution_are_read() -> None:
    for path in ("/dev/stdin", "/dev/fd/0"):
        res = kpdoctor("diagnose", "-f", "json", path, stdin=XTABLES_LOG.read_bytes())
        assert res.returncode == 1, (path, res.stderr)


def test_binary_on_stdin_is_refused_without_reading_on() -> None:
    res = kpdoctor("diagnose", "-", stdin=os.urandom(300_000))
    assert res.returncode == 2 and b"binary data" in res.stderr


def test_stdin_that_never_ends_is_bounded_by_timeout() -> None:
    argv = [sys.executable, "-m", "kpdoctor", "diagnose", "--timeout", "3", "-"]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(MISMATCH.encode())
        proc.stdin.flush()  # and never closed: a writer that hangs
        t0 = time.monotonic()
        try:
            proc.wait(timeout=30)
        finally:
            proc.stdin.close()
        took = time.monotonic() - t0
        err = proc.stderr.read()
    assert took < 15
    assert proc.returncode == 3 and b"gave up after 3 s (--timeout) while reading stdin" in err


def test_the_timeout_holds_when_the_parent_left_signals_blocked() -> None:
    """A mask inherited blocked (a parent that held signals while it forked) is lifted: the
    --timeout's SIGALRM still arrives."""
    import signal

    def blocked() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT, signal.SIGTERM, signal.SIGHUP})

    argv = [sys.executable, "-m", "kpdoctor", "diagnose", "--timeout", "2", "-"]
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=blocked
    ) as proc:
        assert proc.stdin is not None and proc.stderr is not None
        proc.stdin.write(MISMATCH.encode())
        proc.stdin.flush()  # and never closed
        try:
            proc.wait(timeout=30)
        finally:
            proc.stdin.close()
        err = proc.stderr.read()
    assert proc.returncode == 3 and b"gave up after 2 s (--timeout) while reading stdin" in err


# -- exit code 4 and the rest of the report ------------------------------------------------------


def test_a_bug_in_one_check_exits_4_and_the_rest_is_still_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = knowledge.CHECKS["KP103"]

    def broken(facts: object) -> list[object]:
        raise TypeError("'<' not supported between instances of 'str' and 'NoneType'")

    monkeypatch.setitem(knowledge.CHECKS, "KP103", dataclasses.replace(spec, func=broken))
    rep, _ev = diagnose_paths([XTABLES_LOG])
    assert exit_code(rep) == 4
    assert [(e.stage, e.error.split(":")[0]) for e in rep.errors] == [("check KP103", "TypeError")]
    assert rep.findings  # the other checks' findings are all there
    doc = rep.to_json()
    assert doc["internal_errors"] == [{"stage": "check KP103", "error": rep.errors[0].error}]


def test_the_run_timeout_cuts_checks_short_and_still_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = knowledge.CHECKS["KP101"]

    def slow(facts: object, *verified: object) -> list[object]:
        time.sleep(5)
        return []

    monkeypatch.setitem(knowledge.CHECKS, "KP101", dataclasses.replace(spec, func=slow))
    deadline.arm(0.5)
    try:
        rep, _ev = diagnose_paths([XTABLES_LOG])
    finally:
        deadline.disarm()
    assert rep.timed_out == "gave up after 0.5 s (--timeout) while check KP101"
    reasons = {s.code: s.reason for s in rep.skipped}
    assert reasons["KP101"] == "not finished: the run's --timeout was reached"
    assert all(reasons[c] == "not run: the run's --timeout was reached" for c in ("KP102", "KP103") if c in reasons)
    assert exit_code(rep) in (1, 3)
    deadline.arm(None)  # leave the module as a new run finds it


# -- D13, D14, D20: what reaches the reader ---------------------------------------------------------


def test_json_is_valid_utf8_for_a_name_that_is_not(tmp_path: Path) -> None:
    odd = os.fsencode(tmp_path) + b"/\xff\xfename.log"
    with open(odd, "wb") as fh:
        fh.write(XTABLES_LOG.read_bytes())
    res = subprocess.run([sys.executable, "-m", "kpdoctor", "diagnose", "-f", "json", odd], capture_output=True, timeout=60)
    assert res.returncode == 1
    r = report(res)
    assert r["findings"][0]["evidence"][0]["artifact"].endswith("\ufffd\ufffdname.log")  # type: ignore[index]


def test_escape_sequences_in_evidence_never_reach_the_terminal(tmp_path: Path) -> None:
    lines = XTABLES_LOG.read_text().splitlines(True)
    lines = [ln.rstrip("\n") + " \x1b]0;PWNED-TITLE\x07\x1b[2J\x9b31mRED\n" if "xtables" in ln else ln for ln in lines]
    esc = tmp_path / "esc\x1b[31m.log"
    esc.write_text("".join(lines))
    for fmt in ("text", "markdown"):
        res = kpdoctor("diagnose", "-f", fmt, "-v", str(esc))  # -v: evidence lines whole, not cut
        assert res.returncode == 1
        out = res.stdout.decode()
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out, fmt
        assert "\\x1b]0;PWNED-TITLE\\x07" in "".join(out.split())  # shown (a long word may wrap)
    res = kpdoctor("diagnose", "-f", "json", str(esc))
    assert "\x9b" not in res.stdout.decode() and "PWNED-TITLE" in json.dumps(report(res))


def test_a_full_disk_is_an_output_error_not_a_bug() -> None:
    with open("/dev/full", "wb") as full:
        res = subprocess.run([sys.executable, "-m", "kpdoctor", "demo"], stdout=full, stderr=subprocess.PIPE, timeout=60)
    assert res.returncode == 2
    assert res.stderr.decode().strip() == "kpdoctor: cannot write the report to stdout: No space left on device"


# -- D21: a flood of problems is grouped, and a file is read once ----------------------------------


def test_many_files_with_the_same_problem_are_one_line(tmp_path: Path) -> None:
    many = tmp_path / "many"
    many.mkdir()
    for i in range(500):
        (many / f"{i:03}.txt").write_text("hello\n")
    res = kpdoctor("diagnose", "-f", "json", str(many), str(XTABLES_LOG))
    probs = report(res)["input_problems"]
    assert len(probs) == 1, probs  # type: ignore[arg-type]
    assert probs[0]["count"] == 500 and probs[0]["source"].endswith("000.txt and 499 more")  # type: ignore[index]


def test_group_problems_keeps_a_few_alone() -> None:
    few = [InputProblem(f"f{i}", "empty file, skipped") for i in range(3)]
    assert group_problems(few) == few


def test_a_file_given_twice_is_read_once(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(XTABLES_LOG, d / "kp.log")
    rep, _ = diagnose_paths([d / "kp.log", d])
    assert len(rep.artifacts) == 1


# -- D22: kernel files -----------------------------------------------------------------------------


def test_kernel_files_are_read_although_they_say_they_are_empty() -> None:
    stat_file = Path("/proc/net/stat/nf_conntrack")
    if not stat_file.exists():
        pytest.skip("no conntrack statistics in this kernel")
    assert stat_file.stat().st_size == 0  # what made it "an empty file" before
    res = kpdoctor("diagnose", "-f", "json", str(stat_file))
    assert res.returncode in (0, 1), res.stderr
    assert report(res)["subject"]["artifacts"] == [str(stat_file)]  # type: ignore[index]


@pytest.mark.parametrize("folder", ["/proc", "/sys/class"])
def test_a_kernel_folder_is_refused_with_what_to_give_instead(folder: str) -> None:
    res = kpdoctor("diagnose", folder, timeout=30)
    assert res.returncode == 2
    assert res.stderr.decode().splitlines()[0].startswith(f"kpdoctor: {folder}: a kernel file system folder")


# -- objects whose fields have the wrong type (found by fuzzing and by D17's variants) -------------


def test_objects_with_fields_of_the_wrong_type_are_read_as_absent(tmp_path: Path) -> None:
    b = tmp_path / "b"
    shutil.copytree(demo_path("xtables-lock-contention"), b)
    for name in ("pods.json", "daemonsets.json", "services.json"):
        p = b / "cluster" / name
        if not p.exists():
            continue
        doc = json.loads(p.read_text())
        for i, item in enumerate(doc["items"]):
            if i % 3 == 0:
                item["spec"] = "oops"
            elif i % 3 == 1:
                item["metadata"]["labels"] = ["k8s-app", "kube-proxy"]
                if isinstance(item.get("spec"), dict) and "template" in item["spec"]:
                    item["spec"]["template"]["spec"] = ["not", "a", "pod", "spec"]
            else:
                item.setdefault("spec", {})["containers"] = {"name": "x"}
        p.write_text(json.dumps(doc))
    res = kpdoctor("diagnose", "-f", "json", "--min-severity", "info", str(b))
    r = report(res)
    assert res.returncode in (0, 1, 3) and r["internal_errors"] == [], r["internal_errors"]
    assert any("read as absent" in q["message"] for q in r["input_problems"])  # type: ignore[union-attr]


# -- D10: a huge command line ------------------------------------------------------------------------


def test_a_megabyte_command_line_is_cut_and_said_so_quickly(tmp_path: Path) -> None:
    p = tmp_path / "cmdline.txt"
    p.write_text("/usr/local/bin/kube-proxy --v=2 --hostname-override=n1 " + "x" * 1_000_000 + "\n")
    t0 = time.monotonic()
    res = kpdoctor("diagnose", "-f", "json", str(p))
    assert time.monotonic() - t0 < 15, "shlex.split took ~20 s on this"
    problems = {q["source"]: q["message"] for q in report(res)["input_problems"]}  # type: ignore[union-attr]
    assert "cut to its first" in problems[str(p)], problems


# -- found by the fuzzing harness ---------------------------------------------------------------------


def test_a_lock_volume_of_the_wrong_shape_is_not_a_crash(tmp_path: Path) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "calico-node-x", "namespace": "kube-system"},
        "spec": {
            "hostNetwork": True,
            "containers": [{"name": "c", "image": "calico/node:v3.20.0", "command": ["iptables-restore"],
                            "securityContext": {"privileged": True}}],
            "volumes": [{"name": ["xtables-lock"], "hostPath": {"path": "/run/xtables.lock"}},
                        {"name": "lock", "hostPath": "/run/xtables.lock"}],
        },
    }
    p = tmp_path / "pods.json"
    p.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod]}))
    rep, _ev = diagnose_paths([p, XTABLES_LOG])
    assert not rep.errors and exit_code(rep) == 1


def test_an_image_tag_with_thousands_of_digits_is_not_a_version(tmp_path: Path) -> None:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": {"k8s-app": "kube-proxy"}},
        "spec": {"template": {"spec": {"containers": [{"name": "kube-proxy", "image": "kube-proxy:v1.28." + "9" * 5000}]}}},
    }
    p = tmp_path / "ds.json"
    p.write_text(json.dumps(ds))
    rep, _ev = diagnose_paths([p, XTABLES_LOG])
    assert not rep.errors and exit_code(rep) == 1


def test_a_problem_quoting_megabytes_of_evidence_is_one_short_line(tmp_path: Path) -> None:
    p = tmp_path / "save.txt"
    p.write_text("# Generated by iptables-save v1.8.9 on Mon\n*nat\n-A " + "K" * 2_000_000 + " -j ACCEPT\nCOMMIT\n")
    t0 = time.monotonic()
    res = kpdoctor("diagnose", str(p), str(XTABLES_LOG))
    assert time.monotonic() - t0 < 20 and res.returncode == 1
    assert max(len(line) for line in res.stdout.decode().splitlines()) < 5000


def test_a_syslog_date_with_a_huge_number_is_typed_at_once(tmp_path: Path) -> None:
    """Fuzz case 20261123:1190: the kernel-log pattern backtracked for minutes on this header."""
    p = tmp_path / "Untitled 3"
    p.write_text("Oct " + "9" * 2000 + " node1 kernel: nf_conntrack: table full, dropping packet\n" * 3)
    t0 = time.monotonic()
    rep, _ = diagnose_paths([p])
    assert time.monotonic() - t0 < 5 and not rep.errors


# -- D15: no "is not affected" as the fix of a finding --------------------------------------------------


def test_kp103_for_a_build_that_waits_explains_instead_of_saying_not_affected(tmp_path: Path) -> None:
    version = tmp_path / "version.txt"
    version.write_text("Kubernetes v1.22.5-tke.9\n")
    rep, _ = diagnose_paths([XTABLES_LOG, version])
    kp103 = next(f for f in rep.findings if f.code == "KP103")
    assert not any("not affected" in x for x in kp103.fix)
    assert "older than 1.6.2" in kp103.summary and kp103.confidence.label == "medium"


# -- slow inputs the fuzz harness found (each was quadratic; now linear) -------------------------


def test_twenty_thousand_concatenated_json_objects_are_read_at_once() -> None:
    """``kubectl cluster-info dump`` concatenates JSON documents: the line of each was counted
    from the start of the text (20,000 Services took 16 s). A broken last one still gets its line."""
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"namespace": "default"}}
    docs = [json.dumps({**svc, "metadata": {"name": f"s{i}", "namespace": "default"}}, indent=1) for i in range(20_000)]
    text = "\n".join(docs) + '\n{"kind": "Service",\n'
    t0 = time.monotonic()
    objs = parse_objects(text, "cluster-info-dump.json")
    assert time.monotonic() - t0 < 4
    assert len(objs.of("Service")) == 20_000
    (bad,) = [d for d in objs.diagnostics if "truncated JSON" in d.message]
    assert bad.line == text.count("\n")  # the line the unfinished object starts on


def test_a_journald_wrapped_error_block_hit_on_every_line_is_scanned_at_once(tmp_path: Path) -> None:
    """k3s logs through journald: each continuation line of an ``err=<`` block carries the syslog
    prefix, so finding its record's header meant unwrapping up to 400 lines above it, for every
    hit (20,000 lines took 32 s). The finding still cites the block's header line."""
    header = 'Nov 13 16:15:07 node3 k3s[1234]: E1113 16:15:07.931291    1234 proxier.go:1481] "Failed to execute iptables-restore" err=<'
    lines: list[str] = []
    for _ in range(50):
        lines.append(header)
        lines += [f"Nov 13 16:15:07 node3 k3s[1234]:         exit status 1: iptables-restore: line {i} failed" for i in range(390)]
        lines.append("Nov 13 16:15:07 node3 k3s[1234]:  >")
    p = tmp_path / "k3s.log"
    p.write_text("\n".join(lines) + "\n")
    t0 = time.monotonic()
    rep, _ = diagnose_paths([p])
    assert time.monotonic() - t0 < 8 and not rep.errors
    cited = [ev for f in rep.findings for ev in f.evidence if "k3s.log" in ev.artifact]
    assert cited and all(ev.line is not None and lines[ev.line - 1] == header for ev in cited if "err=<" in ev.text)


def test_a_rule_with_an_apostrophe_and_a_megabyte_token_is_split_at_once() -> None:
    """A rule line with a quote and a backslash or apostrophe is shell-split: ``shlex`` took 20 s
    for a 1 MB word. The linear splitter gives shlex's words."""
    rule = '-A KUBE-SERVICES -m comment --comment "it\'s \\"x\\"" -j KUBE-SVC-' + "X" * 1_000_000
    t0 = time.monotonic()
    rs = parse_save(f"*nat\n:KUBE-SERVICES - [0:0]\n{rule}\nCOMMIT\n", "iptables-save.txt", None, 4)
    assert time.monotonic() - t0 < 3
    (r,) = list(rs.all_rules())
    assert r.comment == 'it\'s "x"' and r.target == "KUBE-SVC-" + "X" * 1_000_000


@pytest.mark.parametrize("value", ["1" * 20_000, "1" * 20_000 + "s", "9" * 65 + "ms"])
def test_a_duration_of_thousands_of_digits_is_no_duration_and_read_at_once(value: str) -> None:
    """Go durations are short: a 20,000-digit ``syncPeriod`` took 15 s to be refused."""
    t0 = time.monotonic()
    assert parse_duration(value) is None
    cmd = read_cmdline(f"/usr/local/bin/kube-proxy --iptables-sync-period={value} --v=2")
    assert cmd.argv[-1] == "--v=2" and time.monotonic() - t0 < 1


def test_go_durations_still_read() -> None:
    assert [parse_duration(v) for v in ("30s", "1m0s", "500ms", "0", "1h2m3.5s", "2562047h47m16.854775807s")] == [
        30.0,
        60.0,
        0.5,
        0.0,
        3723.5,
        pytest.approx(9223372036.854776),
    ]


HUGE = "9" * 5000  # int() refuses more than 4,300 digits


@pytest.mark.parametrize(
    "text",
    [
        f"NAME   ENDPOINTS                        AGE\nweb    10.0.0.1:80 + {HUGE} more...   5m\n",  # kubectl get ep
        f"NAME   TYPE        CLUSTER-IP   EXTERNAL-IP   PORT(S)   AGE\nweb    ClusterIP   10.96.0.9    <none>        {HUGE}/TCP   5m\n",
        f"-A -t 10.96.0.10:53 -s rr\n-a -t 10.96.0.10:53 -r 10.244.0.3:53 -m -w {HUGE}\n",  # ipvsadm -Sn
        f"Chain INPUT (policy ACCEPT {HUGE} packets, 0 bytes)\n pkts bytes target prot opt in out source destination\n",
        f"{HUGE}:E0101 00:00:00.000000       1 proxier.go:1] Failed to execute iptables-restore\n",  # grep -n
        f"$ time docker stop web\nweb\n\nreal\t{HUGE}m0.123s\nuser\t0m0.010s\nsys\t0m0.010s\n",
        f"UID PID PPID C STIME TTY TIME CMD\nroot 1 0 0 10:00 ? 00:00:01 kube-apiserver --service-node-port-range={HUGE}-{HUGE}\n",
    ],
    ids=["endpoints-more", "service-port", "ipvs-weight", "iptables-L-packets", "grep-n", "time-real", "nodeport-flag"],
)
def test_a_number_of_thousands_of_digits_is_no_number_not_an_internal_error(tmp_path: Path, text: str) -> None:
    """A damaged paste whose number runs to thousands of digits where a port, a count, a weight
    or a line number stands: read as no number (each of these raised ValueError in int())."""
    path = tmp_path / "paste.txt"
    path.write_text(text)
    report, _ = diagnose_paths([path])
    assert not report.errors, report.errors

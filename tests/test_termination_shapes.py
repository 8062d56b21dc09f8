"""How users show that Pods stop badly (issue 15, part 1 "More shapes"): a timed `docker stop` or
`kubectl delete`, a runtime's stop-timeout warning, a preStop script given as its own file, a
YAML fragment without apiVersion/kind.

Real posted output only: the corpus cases (tests/realworld/cases, lines copied here), and lines
posted in the public threads named at each test. The findings these shapes give are tested with
their cause: tests/checks/test_sigterm_not_forwarded.py and test_grace_period_too_short.py.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from checks.helpers import CASES, DOCKERD, DOCKERD_NEW, of
from conftest import none_of, one, write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.bundle.transcript import bare_command
from kpdoctor.model import Report
from kpdoctor.parse.entrypoint import analyse, init_child
from kpdoctor.parse.shellwords import exec_parts
from kpdoctor.parse.system import parse_cmdline, parse_processes
from kpdoctor.parse.timing import run_command, runtime_stops, stop_command, timed_stops

Diag = Callable[..., Report]

# seed 004: the same mis-indented shape, with a 5 s sleep (within the default grace period)
HOOK_SEED4 = "    lifecycle:\n    preStop:\n      exec:\n        command:\n        - sleep\n        - 5\n"


# -- timed stops ------------------------------------------------------------------------------------
def test_the_corpus_file_as_posted_is_read_as_a_timed_stop() -> None:
    ev = load([CASES / "k8s-64015" / "docker-stop.txt"])
    (art,) = ev.artifacts
    assert art.kind == Kind.STOP_TIMING and art.first_line == 4
    assert art.attrs["started"].startswith("docker run -d --rm --name test busybox")


@pytest.mark.parametrize(
    "line,tool,timeout,stated",
    [
        ("time docker stop test", "docker", 10, False),
        ("sudo time podman stop -t 30 redlib", "podman", 30, True),
        ("time nerdctl container stop --time=5 web", "nerdctl", 5, True),
        ("time crictl stop -t 20 1f2e", "crictl", 20, True),
        ("time kubectl delete pod test-pod", "kubectl", 30, False),
        ("time kubectl -n e2e delete po/test-pod --grace-period=60", "kubectl", 60, True),
    ],
)
def test_stop_commands_and_their_timeouts(line: str, tool: str, timeout: float, stated: bool) -> None:
    cmd = stop_command(line)
    assert cmd is not None and (cmd.tool, cmd.timeout, cmd.stated) == (tool, timeout, stated)


@pytest.mark.parametrize(
    "line",
    ["time crictl stop 1f2e", "time kubectl delete pod x --force --grace-period=0", "time kubectl delete pod x --now",
     "time docker ps", "time kubectl delete deployment web --wait=false"],
)  # fmt: skip
def test_stops_that_say_nothing_about_sigterm(line: str) -> None:
    """crictl's default timeout is 0 (an immediate kill); --force/--now/--wait=false do not wait."""
    assert stop_command(line) is None


def test_zsh_and_gnu_time_formats() -> None:
    zsh = "docker stop test  0.05s user 0.02s system 0% cpu 10.408 total\n"
    (s,) = timed_stops(zsh)
    assert s.seconds == pytest.approx(10.408) and s.killed and s.command.tool == "docker"
    gnu = "test\n0.04user 0.01system 0:10.41elapsed 0%CPU (0avgtext+0avgdata 41236maxresident)k\n"
    (g,) = timed_stops(gnu, "/usr/bin/time docker stop test")
    assert g.seconds == pytest.approx(10.41)


def _date(fmt: list[str], at: int) -> str:
    """What this machine's `date` prints for the time ``at`` (C locale, UTC)."""
    env = {"LC_ALL": "C", "TZ": "UTC", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["date", *fmt, "-d", f"@{at}"], capture_output=True, text=True, env=env, check=True).stdout


@pytest.mark.parametrize("fmt", [[], ["-R"], ["-Is"], ["--rfc-3339=ns"]], ids=["default", "rfc-2822", "iso", "ns"])
def test_a_stop_timed_with_date_before_and_after(fmt: list[str]) -> None:
    """`date; kubectl delete pod x && date`: the two readings time the deletion, which kubectl
    makes wait until the Pod is gone (to the second: whole-second readings may show 29 s)."""
    t0 = 1_669_714_484
    out = _date(fmt, t0) + 'pod "web-7d9c-x2kq" deleted\n' + _date(fmt, t0 + 31)
    (s,) = timed_stops(out, "date; kubectl delete pod web-7d9c-x2kq && date")
    assert s.seconds == pytest.approx(31) and s.killed and s.command.targets == ("web-7d9c-x2kq",)
    assert (s.start_line, s.line) == (0, 2)
    # the whole paste, prompt included; and a stop that took 2 s is no kill
    (w,) = timed_stops("$ date; kubectl delete pod web-7d9c-x2kq && date\n" + out)
    assert w.command_line == 0 and w.seconds == pytest.approx(31)
    (quick,) = timed_stops(_date(fmt, t0) + "web\n" + _date(fmt, t0 + 2), "date && docker stop web; date")
    assert quick.command.tool == "docker" and not quick.killed
    # whole seconds: a kill at 30 s may read 29
    (edge,) = timed_stops(_date(fmt, t0) + 'pod "w" deleted\n' + _date(fmt, t0 + 29), "date; kubectl delete pod w; date")
    assert edge.killed == (fmt != ["--rfc-3339=ns"])


def test_the_en_us_locale_s_twelve_hour_date_and_readings_that_time_nothing() -> None:
    """coreutils' date in en_US prints a 12-hour clock ("Thu Feb 23 11:46:25 PM UTC 2023", as
    posted in a shell session); readings around no stop, or running backwards, time nothing."""
    text = 'Thu Feb 23 11:59:50 AM UTC 2023\npod "w" deleted\nThu Feb 23 12:00:21 PM UTC 2023\n'
    (s,) = timed_stops(text, "date; kubectl delete pod w && date")
    assert s.seconds == pytest.approx(31) and s.killed
    assert timed_stops("Thu Feb 23 11:59:50 AM UTC 2023\nThu Feb 23 12:00:21 PM UTC 2023\n", "date; date") == []
    backwards = 'Thu Mar  2 00:00:10 UTC 2023\npod "w" deleted\nWed Mar  1 23:59:40 UTC 2023\n'
    assert timed_stops(backwards, "date; kubectl delete pod w; date") == []
    assert timed_stops("Thu Feb 23 11:59:50 AM UTC 2023\npod \"w\" deleted\n", "date; kubectl delete pod w") == []


def test_docker_run_is_read_for_its_pid_1() -> None:
    run = run_command("docker run -d --rm --name test busybox sh -c 'while true; do sleep 1; done'")
    assert run is not None and run.name == "test" and run.image == "busybox"
    assert run.command == ["sh", "-c", "while true; do sleep 1; done"] and not run.init
    podman = run_command("podman run --rm -d --name redlib -p 127.0.0.1:8080:8080 quay.io/redlib/redlib:latest")
    assert podman is not None and podman.image == "quay.io/redlib/redlib:latest" and podman.command == []


# -- runtime warnings ---------------------------------------------------------------------------------
def test_dockerd_journal_in_both_wordings_and_not_the_kill_that_failed() -> None:
    old = runtime_stops(DOCKERD)
    assert [(h.runtime, h.container[:12], h.seconds, h.signal) for h in old] == [
        ("dockerd", "679813472f3d", 10.0, "signal 15")
    ]
    (new,) = runtime_stops(DOCKERD_NEW)
    assert new.container.startswith("1ab17352d91f") and new.seconds == 10.0


# -- preStop scripts and YAML fragments -------------------------------------------------------------
def test_a_shell_script_not_named_for_a_hook_is_not_taken_for_one(tmp_path: Path) -> None:
    p = tmp_path / "notes.sh"
    p.write_text((CASES / "MeshWeaver-2043" / "preStop.sh").read_text())
    ev = load([p])
    assert not ev.artifacts


def test_a_short_prestop_fragment_is_no_finding_and_not_a_missing_hook(diagnose: Diag) -> None:
    r = diagnose({"lifecycle.yaml": HOOK_SEED4})
    assert of(r, "KP402") == [] and of(r, "KP401") == []
    assert [i.kind for i in r.inputs] == [Kind.K8S_OBJECTS.value]


@pytest.mark.parametrize("blanks", [100, 1000, 4000])
def test_a_timing_line_of_blanks_is_read_in_linear_time(blanks: int) -> None:
    """zsh's `time` line is found from its numbers: a deeply indented YAML (fuzz case 4242:1035, 18 s)
    or a crafted line of blanks (minutes) cost no backtracking."""
    import time as clock

    from kpdoctor.parse.timing import MAX_LINE, elapsed

    lines = [
        " " * blanks + "x 0.05s user 0.02s system 0% cpu total",
        "x" + " " * blanks + "0.05s user 0.02s system 0% cpu 1.5 total",
    ]
    t0 = clock.perf_counter()
    got = [elapsed(line[:MAX_LINE]) for line in lines]
    assert clock.perf_counter() - t0 < 0.5
    assert got[0] is None and got[1] == (1.5, "x")
    assert elapsed("docker stop test  0.05s user 0.02s system 0% cpu 10.408 total") == (10.408, "docker stop test")


# -- a container's PID 1 read from /proc/1/cmdline ------------------------------------------------
# kubectl's own notice for the exec form without `--` (staging/src/k8s.io/kubectl/pkg/cmd/exec)
_KUBECTL_EXEC_NOTICE = (
    "kubectl exec [POD] [COMMAND] is DEPRECATED and will be removed in a future version. "
    "Use kubectl exec [POD] -- [COMMAND] instead."
)


def _cmdline_of(argv: list[str], tmp_path: Path) -> bytes:
    """The bytes of /proc/PID/cmdline of a real process started here with ``argv`` (in
    ``tmp_path``): its words, each ended by a NUL."""
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            raw = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            if raw.count(b"\0") >= len(argv):  # exec done (before it, the forked python's own)
                return raw
            subprocess.run(["sleep", "0.02"], check=True)
        raise AssertionError(f"/proc/{proc.pid}/cmdline never showed {argv}")
    finally:
        proc.kill()
        proc.wait()


def test_a_pid_1_cmdline_as_a_terminal_shows_it_nuls_lost_or_kept(tmp_path: Path) -> None:
    """`cat /proc/1/cmdline` prints the words NUL-separated; a terminal shows the NULs as
    nothing, so a shell's path runs into its script's ("/bin/bash./entrypoint.sh")."""
    (tmp_path / "entrypoint.sh").write_text("sleep 30\n")
    raw = _cmdline_of(["/bin/bash", "./entrypoint.sh"], tmp_path)
    assert raw == b"/bin/bash\0./entrypoint.sh\0"
    for shown in (raw.decode(), raw.replace(b"\0", b"").decode()):
        (p,) = parse_cmdline(shown, 1, 5)
        assert (p.pid, p.argv, p.program, p.line) == (1, ["/bin/bash", "./entrypoint.sh"], "bash", 5)
    inline = _cmdline_of(["/bin/sh", "-c", "sleep 30; echo done"], tmp_path).replace(b"\0", b"").decode()
    (p,) = parse_cmdline(inline, 1)
    assert p.argv == ["/bin/sh", "-c", "sleep 30; echo done"]
    assert parse_cmdline(_KUBECTL_EXEC_NOTICE + "\n" + inline + "\n", 1)[0].argv[0] == "/bin/sh"
    assert [q.program for q in parse_cmdline("gunicorn app:app -w 4", 1)] == ["gunicorn"]


@pytest.mark.parametrize(
    "line,target,inner",
    [
        ("kubectl exec -it web-7d9c8b6f4-x2kqz -- cat /proc/1/cmdline", "web-7d9c8b6f4-x2kqz", ["cat", "/proc/1/cmdline"]),
        ("k exec -it web-0 cat /proc/1/cmdline", "web-0", ["cat", "/proc/1/cmdline"]),
        ("kubectl -n shop exec web-0 -c app -- ps -ef", "web-0", ["ps", "-ef"]),
        ("docker exec --user=root api cat /proc/1/cmdline", "api", ["cat", "/proc/1/cmdline"]),
        ("kubectl exec web-0", "web-0", []),
        ("kubectl get pods", None, []),
    ],
)  # fmt: skip
def test_what_an_exec_enters_and_runs(line: str, target: str | None, inner: list[str]) -> None:
    assert exec_parts(line.split()) == (target, inner)


@pytest.mark.parametrize(
    "line,taken",
    [
        ("kubectl exec -it web-0 -- cat /proc/1/cmdline", True),
        ("k exec -it web-0 cat /proc/1/cmdline", True),
        ("iptables-save | grep KUBE-SVC", True),
        ("cat /proc/sys/net/ipv4/ip_forward", True),
        ("cat is what I ran first", False),
        ("more logs below", False),
        ("k8s 1.24 on ubuntu", False),
        ("$ kubectl get pods", False),  # a prompt: the transcript's own
        ("kubectl", False),
    ],
)  # fmt: skip
def test_a_command_pasted_without_its_prompt(line: str, taken: bool) -> None:
    assert (bare_command(line) is not None) == taken


def test_a_container_pid_1_shell_read_from_its_cmdline(tmp_path: Path, diagnose: Diag) -> None:
    """The paste as users post it (the command without a prompt, kubectl's notice, the words run
    together): a shell still PID 1 while the container runs did not exec the application. A
    script file's content is not shown (suspected); a -c script without a trap is (shown); with
    a timed deletion of a Pod of the same ReplicaSet, the deletion's finding names PID 1."""
    (tmp_path / "entrypoint.sh").write_text("sleep 30\n")
    glued = _cmdline_of(["/bin/bash", "./entrypoint.sh"], tmp_path).replace(b"\0", b"").decode()
    paste = f"k exec -it api-579b8875fb-zrbtn cat /proc/1/cmdline\n{_KUBECTL_EXEC_NOTICE}\n{glued}\n"
    f = one(diagnose({"pid1.txt": paste}), "KP403")
    assert f.suspected and f.confidence.name == "LOW"
    assert "kubectl exec api-579b8875fb-zrbtn -- cat ./entrypoint.sh" in f.decided_by
    assert [c.line for c in f.evidence] == [1, 3] and f.evidence[1].text == "/bin/bash./entrypoint.sh"
    inline = _cmdline_of(["/bin/sh", "-c", "sleep 30; echo done"], tmp_path).replace(b"\0", b"").decode()
    g = one(diagnose({"pid1.txt": paste.replace(glued, inline)}), "KP403")
    assert not g.suspected and g.confidence.name == "HIGH"
    trapped = _cmdline_of(["/bin/sh", "-c", "trap 'kill $p' TERM; sleep 30 & p=$!; wait"], tmp_path)
    none_of(diagnose({"pid1.txt": paste.replace(glued, trapped.replace(b"\0", b"").decode())}), "KP403")
    t0 = 1_669_714_484
    timing = (
        "$ date; kubectl delete pod api-579b8875fb-jzmb2 && date\n"
        + _date([], t0)
        + 'pod "api-579b8875fb-jzmb2" deleted\n'
        + _date([], t0 + 31)
    )
    report = diagnose({"pid1.txt": paste, "timing.txt": timing})
    h = one(report, "KP403")
    assert h.confidence.name == "HIGH" and "read as PID 1 of Pod api-579b8875fb-zrbtn" in h.summary
    assert h.evidence[0].text == "/bin/bash./entrypoint.sh"
    # a node's `cat /proc/1/cmdline` (no exec: its init) says nothing of containers
    none_of(diagnose({"node.txt": "$ cat /proc/1/cmdline\n/sbin/init\n"}), "KP403")


def test_a_markdown_paste_of_both_blocks(tmp_path: Path, diagnose: Diag) -> None:
    """The two blocks as an issue shows them, between prose and fences: the bare command's part
    is read as its output too, and the deletion's finding names PID 1 from it."""
    (tmp_path / "docker-entrypoint.sh").write_text("sleep 30\n")
    glued = _cmdline_of(["/bin/sh", "./docker-entrypoint.sh"], tmp_path).replace(b"\0", b"").decode()
    t0 = 1_669_714_484
    paste = (
        "Our pods take forever to stop:\n\n```\n"
        f"k exec -it web-7d9c8b6f4-x2kqz cat /proc/1/cmdline\n{_KUBECTL_EXEC_NOTICE}\n{glued}\n```\n\nand\n\n```\n"
        "❯ date; k delete po web-7d9c8b6f4-q7zbn && date\n"
        + _date([], t0)
        + 'pod "web-7d9c8b6f4-q7zbn" deleted\n'
        + _date([], t0 + 31)
        + "```\n"
    )
    f = one(diagnose({"issue.md": paste}), "KP403")
    assert f.confidence.name == "HIGH" and "read as PID 1 of Pod web-7d9c8b6f4-x2kqz" in f.summary
    assert f.evidence[0].text == glued and f.evidence[0].line == 6


# -- inits that signal their child alone -------------------------------------------------------


@pytest.mark.parametrize(
    "argv,child",
    [
        (["tini", "--", "/start.sh"], ["/start.sh"]),
        (["/sbin/tini", "-s", "-p", "SIGTERM", "--", "node", "app.js"], ["node", "app.js"]),
        (["/dev/init", "--", "sh", "-c", "node app.js"], ["sh", "-c", "node app.js"]),  # docker run --init
        (["tini", "-sg", "--", "/start.sh"], None),  # -g: the child's process group is signalled
        (["dumb-init", "--", "/start.sh"], None),  # dumb-init signals the group by default
        (["dumb-init", "--single-child", "/start.sh"], ["/start.sh"]),
        (["catatonit", "--", "/start.sh"], None),
    ],
)
def test_which_inits_signal_their_child_alone(argv: list[str], child: list[str] | None) -> None:
    assert init_child(argv) == child


def test_a_spec_whose_init_starts_a_shell_that_keeps_sigterm_is_judged_by_the_shell() -> None:
    kept = analyse(["tini", "--", "sh", "-c", "node app.js & wait"], [])
    assert kept is not None and kept.forwards is False and kept.shell == "sh" and "tini" in kept.reason
    grouped = analyse(["dumb-init", "--", "sh", "-c", "node app.js & wait"], [])
    assert grouped is not None and grouped.forwards is True
    execs = analyse(["tini", "--", "sh", "-c", "exec node app.js"], [])
    assert execs is not None and execs.forwards is True


def test_busybox_ps_shows_a_script_s_name_before_its_argv() -> None:
    """libbb/procps.c read_cmdline: `{comm} argv...` when the name differs from argv[0]'s; the
    listing below was printed by busybox 1.35 in a PID namespace (tests/lab/test_init_signals.py)."""
    listing = (
        "PID   USER     COMMAND\n"
        "    1 root     tini -- /tmp/entry.sh\n"
        "    2 root     {entry.sh} /bin/sh /tmp/entry.sh\n"
        "   44 root     busybox ps\n"
    )
    procs = {p.pid: p for p in parse_processes(listing, 1)}
    assert procs[2].program == "sh" and procs[2].argv == ["/bin/sh", "/tmp/entry.sh"]
    assert procs[2].command == "{entry.sh} /bin/sh /tmp/entry.sh"  # cited as printed


# Rows a grep kept without their header: procps 4.0's `ps -ef` and `ps aux` (as they print here),
# and Alpine's busybox `ps` with its TIME column (as posted in envoyproxy/envoy#13944)
HEADERLESS = {
    "ps -ef": "root         7     1  0 15:26 ?        00:00:00 sh -c exec kube-proxy --config=/var/lib/kube-proxy/c.conf\n",
    "ps aux": "root         7  0.3  0.0  39860 10904 ?        SLl  15:26   1:14 sh /docker-entrypoint.sh envoy\n",
    "busybox": "    1 root      0:00 sh /docker-entrypoint.sh envoy -c /etc/envoy/envoy.yaml\n",
}


@pytest.mark.parametrize("form", sorted(HEADERLESS))
def test_ps_rows_without_their_header_are_read_by_the_columns_only_their_listing_has(form: str) -> None:
    (p,) = parse_processes(HEADERLESS[form])
    assert p.pid in (1, 7) and p.command.startswith("sh ") and p.line == 1


def test_headerless_busybox_rows_alone_are_a_process_list(tmp_path: Path, diagnose: Diag) -> None:
    rows = HEADERLESS["busybox"] + "    7 envoy     0:00 envoy -c /etc/envoy/envoy.yaml\n"
    ev = load([write(tmp_path, "ps.txt", rows)])
    assert [(a.kind, a.attrs.get("fragment")) for a in ev.artifacts] == [(Kind.PROCESSES, "true")]
    f = one(diagnose({"ps.txt": rows}), "KP403")
    assert "sh /docker-entrypoint.sh envoy" in f.summary


@pytest.mark.parametrize(
    "text",
    [
        "-rw-r--r-- 1 root root 4096 Nov 30 10:00 kube-proxy.log\n",  # ls -l
        "  2 root  0:00 [kthreadd]\nsome words after it\nand more words\nand a fourth line\n",  # one row among prose
    ],
)
def test_other_lines_are_not_taken_for_headerless_ps_rows(text: str, tmp_path: Path) -> None:
    assert not [a for a in load([write(tmp_path, "x.txt", text)]).artifacts if a.kind == Kind.PROCESSES]

"""How users show that Pods stop badly (issue 15, part 1 "More shapes"): a timed `docker stop` or
`kubectl delete`, a runtime's stop-timeout warning, a preStop script given as its own file, a
YAML fragment without apiVersion/kind.

Real posted output only: the corpus cases (tests/realworld/cases, lines copied here), and lines
posted in the public threads named at each test.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import all_findings

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.model import Confidence, Finding, Report, Severity
from kpdoctor.parse.timing import run_command, runtime_stops, stop_command, timed_stops

Diag = Callable[..., Report]
CASES = Path(__file__).parent / "realworld" / "cases"

# k8s-64015 (kubernetes/kubernetes#64015, description by cofyc): busybox `sh -c` loop as PID 1
DOCKER_STOP = (
    "$ docker run -d --rm --name test busybox sh -c 'while true; do sleep 1; done'\n"
    "aa827df5d7bfffc5ca4fae2429d0b761a5a142c57ba3e1faa59b305c92f1c875\n"
    "$ time docker stop test\n"
    "test\n"
    "\n"
    "real\t0m10.408s\n"
    "user\t0m0.048s\n"
    "sys\t0m0.020s\n"
)
# verification-tests-1640 (openshift/verification-tests#1640, rbbratta): bash -c "sleep ..." as PID 1
KUBECTL_DELETE = 'pod "test-pod" deleted\n\nreal    0m41.459s\nuser    0m0.175s\nsys     0m0.050s\n'
# redlib-org/redlib#205: `podman stop redlib`, as posted
PODMAN_STOP = (
    "WARN[0010] StopSignal SIGTERM failed to stop container redlib in 10 seconds, resorting to SIGKILL \nredlib\n"
)
# moby/moby#32938 (PlugIN73): dockerd's journal; the second line (SIGKILL did not work either) is another story
DOCKERD = (
    'Mar 16 07:14:12 evaluator3 dockerd[27857]: time="2018-03-16T07:14:12.899731592Z" level=info '
    'msg="Container 679813472f3d5dc082a55b7e3d62a16109115df69609cae50701fa9bcd4133f2 failed to exit within 10 '
    'seconds of signal 15 - using the force"\n'
    'Mar 16 07:14:22 evaluator3 dockerd[27857]: time="2018-03-16T07:14:22.911874532Z" level=info '
    'msg="Container 679813472f3d failed to exit within 10 seconds of kill - trying direct SIGKILL"\n'
)
# haiwen/seafile-docker#496: dockerd 20.10+ wording (container= after the message)
DOCKERD_NEW = (
    'Aug 03 13:16:19 pandora dockerd[3906408]: time="2026-08-03T13:16:19.246566562+02:00" level=info '
    'msg="Container failed to exit within 10s of signal 15 - using the force" '
    "container=1ab17352d91f95b7bcdb39d2bc068bbee209b257154378bb3ad00ceccdf355d4\n"
    'Aug 03 13:16:19 pandora dockerd[3906408]: time="2026-08-03T13:16:19.246694519+02:00" level=info '
    'msg="stopping restart-manager" container=1ab17352d91f95b7bcdb39d2bc068bbee209b257154378bb3ad00ceccdf355d4\n'
)
# containerd/containerd#2744 (ivan4th): the CRI plugin's stop that timed out, then the kill
CONTAINERD = (
    'INFO[2018-12-03T21:09:13.471760732Z] StopContainer for "99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33" with timeout 10 (s)\n'
    'INFO[2018-12-03T21:09:13.480194210Z] Stop container "99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33" with signal terminated\n'
    'ERRO[2018-12-03T21:09:23.488485051Z] An error occurs during waiting for container "99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33" to be stopped  error="wait container \\"99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33\\" stop timeout"\n'
    'INFO[2018-12-03T21:09:23.488890401Z] Kill container "99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33"\n'
)
# kubernetes/kubernetes#65496 (vojbarzz): the hook, as pasted from the Deployment, and its script
HOOK_65496 = '        lifecycle:\n          preStop:\n            exec:\n              command: ["/shutdown.sh"]\n'
SCRIPT_65496 = (
    "#!/bin/sh\n\nfor i in 1 2 3 4 5 6 7 8 9 10\ndo\n"
    '        echo "Shutdown $i " `date`  >> /data/shutdown.log\n        sleep 30\ndone\n'
)
# nginx/nginx-gateway-fabric#1171 docs: a lifecycle block that lost an indent in the paste
HOOK_NGF = '   lifecycle:\n   preStop:\n      exec:\n      command:\n      - /bin/sleep\n      - "40"\n'
# seed 004: the same mis-indented shape, with a 5 s sleep (within the default grace period)
HOOK_SEED4 = "    lifecycle:\n    preStop:\n      exec:\n        command:\n        - sleep\n        - 5\n"


def of(report: Report, code: str) -> list[Finding]:
    return [f for f in all_findings(report) if f.code == code]


# -- timed stops ------------------------------------------------------------------------------------
def test_a_docker_stop_that_took_the_whole_timeout_names_the_shell_as_pid_1(diagnose: Diag) -> None:
    r = diagnose({"docker-stop.txt": DOCKER_STOP})
    (f,) = of(r, "KP403")
    assert f.cause == "sigterm-not-forwarded" and f.severity == Severity.WARNING
    assert f.confidence == Confidence.HIGH  # the run command shows `sh -c` with a loop as PID 1
    assert "took 10.408 s, the stop timeout (10 s, docker's default)" in f.summary
    assert "sh stays PID 1" in f.summary
    assert [(c.line, c.text) for c in f.evidence] == [
        (1, "docker run -d --rm --name test busybox sh -c 'while true; do sleep 1; done'"),
        (3, "time docker stop test"),
        (6, "real\t0m10.408s"),
    ]
    assert any("exec" in fix for fix in f.fix)
    (read,) = [i for i in r.inputs if i.kind == Kind.STOP_TIMING.value]
    assert read.describe().endswith("-> timed container stop (output of `time docker stop test`)")


def test_the_corpus_file_as_posted_is_read_as_a_timed_stop() -> None:
    ev = load([CASES / "k8s-64015" / "docker-stop.txt"])
    (art,) = ev.artifacts
    assert art.kind == Kind.STOP_TIMING and art.first_line == 4
    assert art.attrs["started"].startswith("docker run -d --rm --name test busybox")


def test_a_fast_stop_is_no_finding(diagnose: Diag) -> None:
    """The same session once the loop traps TERM (PR 64015's fix): the stop takes no time."""
    fast = DOCKER_STOP.replace("0m10.408s", "0m0.408s")
    assert of(diagnose({"docker-stop.txt": fast}), "KP403") == []


def test_a_kubectl_delete_that_took_the_grace_period_assumes_the_default_and_says_so(diagnose: Diag) -> None:
    (f,) = of(diagnose({"kubectl-delete-timing.txt": KUBECTL_DELETE}), "KP403")
    assert f.confidence == Confidence.MEDIUM
    assert "deleting Pod test-pod took 41.459 s" in f.summary
    assert "the grace period (30 s, the default, assumed" in f.summary
    assert [c.line for c in f.evidence] == [1, 3]
    assert f.subject["workload"] == "Pod/test-pod"


def test_the_deleted_pods_spec_names_its_pid_1(diagnose: Diag) -> None:
    """The Pod of verification-tests#1640 (its command as the PR quotes it) given with the timing."""
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: test-pod\nspec:\n  containers:\n  - name: c\n"
        "    image: registry.access.redhat.com/ubi8/ubi\n"
        '    command: ["/bin/bash", "-c", "sleep 3600"]\n'
    )
    (f,) = of(diagnose({"kubectl-delete-timing.txt": KUBECTL_DELETE, "pod.yaml": pod}), "KP403")
    assert "PID 1 is `/bin/bash -c 'sleep 3600'`" in f.summary
    assert f.evidence[0].artifact.endswith("pod.yaml")


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


def test_docker_run_is_read_for_its_pid_1() -> None:
    run = run_command("docker run -d --rm --name test busybox sh -c 'while true; do sleep 1; done'")
    assert run is not None and run.name == "test" and run.image == "busybox"
    assert run.command == ["sh", "-c", "while true; do sleep 1; done"] and not run.init
    podman = run_command("podman run --rm -d --name redlib -p 127.0.0.1:8080:8080 quay.io/redlib/redlib:latest")
    assert podman is not None and podman.image == "quay.io/redlib/redlib:latest" and podman.command == []


# -- runtime warnings ---------------------------------------------------------------------------------
def test_podmans_warning_is_read_as_a_runtime_stop(diagnose: Diag) -> None:
    r = diagnose({"podman-stop.txt": PODMAN_STOP})
    (f,) = of(r, "KP403")
    assert "podman had to kill 1 container stop(s) (redlib): they did not exit on SIGTERM within 10 s" in f.summary
    assert f.evidence[0].line == 1 and "resorting to SIGKILL" in f.evidence[0].text


def test_dockerd_journal_in_both_wordings_and_not_the_kill_that_failed() -> None:
    old = runtime_stops(DOCKERD)
    assert [(h.runtime, h.container[:12], h.seconds, h.signal) for h in old] == [
        ("dockerd", "679813472f3d", 10.0, "signal 15")
    ]
    (new,) = runtime_stops(DOCKERD_NEW)
    assert new.container.startswith("1ab17352d91f") and new.seconds == 10.0


def test_dockerd_journal_is_a_runtime_log_not_a_kube_proxy_log(diagnose: Diag) -> None:
    r = diagnose({"dockerd.log": DOCKERD + DOCKERD_NEW})
    assert [i.kind for i in r.inputs] == [Kind.RUNTIME_LOG.value]
    (f,) = of(r, "KP403")
    assert f.occurrences == 2 and [c.line for c in f.evidence] == [1, 3]


def test_containerds_stop_timeout(diagnose: Diag) -> None:
    (h,) = runtime_stops(CONTAINERD)
    assert h.runtime == "containerd" and h.line == 2
    (f,) = of(diagnose({"containerd.log": CONTAINERD}), "KP403")
    assert "containerd had to kill" in f.summary and "99a97d5c7094" in f.summary


# -- preStop scripts and YAML fragments -------------------------------------------------------------
def test_a_prestop_script_file_with_an_unbounded_wait(diagnose: Diag) -> None:
    """MeshWeaver#2043: the drain loop, given as preStop.sh, no Pod spec."""
    script = (CASES / "MeshWeaver-2043" / "preStop.sh").read_text()
    r = diagnose({"preStop.sh": script})
    (f,) = of(r, "KP402")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM
    assert "waits without a bound" in f.summary and "not given: the default, 30 s, assumed" in f.summary
    assert f.evidence[0].line == 1 and f.evidence[0].text.startswith("while ! curl")
    assert [i.kind for i in r.inputs] == [Kind.PRESTOP_SCRIPT.value]


def test_a_shell_script_not_named_for_a_hook_is_not_taken_for_one(tmp_path: Path) -> None:
    p = tmp_path / "notes.sh"
    p.write_text((CASES / "MeshWeaver-2043" / "preStop.sh").read_text())
    ev = load([p])
    assert not ev.artifacts


def test_a_hook_fragment_and_the_script_it_runs(diagnose: Diag) -> None:
    """k8s#65496: `command: ["/shutdown.sh"]` and a script sleeping 30 s ten times."""
    r = diagnose({"handler.yaml": HOOK_65496, "shutdown.sh": SCRIPT_65496})
    (f,) = of(r, "KP402")
    assert "sleeps 300 s in preStop" in f.summary
    assert "terminationGracePeriodSeconds is 30 (not in the fragment: the default, assumed)" in f.summary
    assert f.confidence == Confidence.LOW  # no Service given, and the grace period not in the fragment
    assert any(c.artifact.endswith("shutdown.sh") and c.text == "sleep 30" for c in f.evidence)
    (frag,) = [i for i in r.inputs if i.kind == Kind.K8S_OBJECTS.value]
    assert "a `lifecycle:` block without apiVersion/kind: what it leaves out is unknown" in frag.describe()


def test_a_misindented_lifecycle_block_is_read(diagnose: Diag) -> None:
    (f,) = of(diagnose({"lifecycle.yaml": HOOK_NGF}), "KP402")
    assert "sleeps 40 s in preStop" in f.summary and "not in the fragment" in f.summary


def test_a_short_prestop_fragment_is_no_finding_and_not_a_missing_hook(diagnose: Diag) -> None:
    r = diagnose({"lifecycle.yaml": HOOK_SEED4})
    assert of(r, "KP402") == [] and of(r, "KP401") == []
    assert [i.kind for i in r.inputs] == [Kind.K8S_OBJECTS.value]


@pytest.mark.parametrize("blanks", [100, 1000, 4000])
def test_a_timing_line_of_blanks_is_read_in_linear_time(blanks: int) -> None:
    """zsh's `time` line is found from its numbers: a deeply indented YAML (fuzz case 4242:1035, 18 s)
    or a crafted line of blanks (minutes) cost no backtracking."""
    import time as clock

    from kpdoctor.parse.timing import MAX_LINE, _elapsed

    lines = [
        " " * blanks + "x 0.05s user 0.02s system 0% cpu total",
        "x" + " " * blanks + "0.05s user 0.02s system 0% cpu 1.5 total",
    ]
    t0 = clock.perf_counter()
    got = [_elapsed(line[:MAX_LINE]) for line in lines]
    assert clock.perf_counter() - t0 < 0.5
    assert got[0] is None and got[1] == (1.5, "x")
    assert _elapsed("docker stop test  0.05s user 0.02s system 0% cpu 10.408 total") == (10.408, "docker stop test")

"""KP400 and KP403 sigterm-not-forwarded: a shell as PID 1 in a Pod spec, and stops that took the
whole timeout (timed `docker stop` or `kubectl delete`, a runtime's stop-timeout warning)."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import DOCKERD, DOCKERD_NEW, Diag, deployment, objects, of, run, service
from conftest import one

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.model import Confidence, Severity
from kpdoctor.parse.timing import runtime_stops


def test_shell_pid1_that_backgrounds_the_app(tmp_path: Path) -> None:
    rep = run([objects(tmp_path, deployment("api", ["/bin/sh", "-c", "/opt/app1 & /opt/app2 & wait"]), service("api"))])
    f = one(rep, "KP400")
    assert f.severity == Severity.WARNING
    assert f.subject == {"service": "shop/api", "workload": "Deployment/shop/api"}
    assert "`/opt/app1` runs in the background" in f.summary
    assert "exec" in f.fix[0]


def test_sh_c_without_exec_depends_on_the_image_shell(tmp_path: Path) -> None:
    f = one(
        run([objects(tmp_path, deployment("api", ["sh", "-c", "/app/server --port 8080"]), service("api"))]), "KP400"
    )
    assert f.confidence.label == "medium"
    assert "dash" in f.summary


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
# containerd/containerd#2744 (ivan4th): the CRI plugin's stop that timed out, then the kill
CONTAINERD = (
    'INFO[2018-12-03T21:09:13.471760732Z] StopContainer for "99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33" with timeout 10 (s)\n'
    'INFO[2018-12-03T21:09:13.480194210Z] Stop container "99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33" with signal terminated\n'
    'ERRO[2018-12-03T21:09:23.488485051Z] An error occurs during waiting for container "99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33" to be stopped  error="wait container \\"99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33\\" stop timeout"\n'
    'INFO[2018-12-03T21:09:23.488890401Z] Kill container "99a97d5c709457dfd4b281869e7c40b15dcc6d86617628210b90c5054c9b6c33"\n'
)


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


def test_podmans_warning_is_read_as_a_runtime_stop(diagnose: Diag) -> None:
    r = diagnose({"podman-stop.txt": PODMAN_STOP})
    (f,) = of(r, "KP403")
    assert "podman had to kill 1 container stop(s) (redlib): they did not exit on SIGTERM within 10 s" in f.summary
    assert f.evidence[0].line == 1 and "resorting to SIGKILL" in f.evidence[0].text


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


# `ps -ef` run here as PID 1's child in a new PID namespace (`unshare -fp --mount-proc`), as a
# container shows it, pasted below the `docker exec` that printed it.
PS_SCRIPT = """\
$ docker exec web ps -ef
UID          PID    PPID  C STIME TTY          TIME CMD
root           1       0  0 23:08 ?        00:00:00 sh /tmp/docker-entrypoint.sh
root           2       1  0 23:08 ?        00:00:00 sleep 30
root           3       1  0 23:08 ?        00:00:00 ps -ef
"""
PS_TRAP = """\
$ docker exec web ps -ef
UID          PID    PPID  C STIME TTY          TIME CMD
root           1       0  0 23:08 ?        00:00:00 sh -c trap "kill -TERM \\$p" TERM; sleep 30 & p=$!; ps -ef; kill $p
root           2       1  0 23:08 ?        00:00:00 sleep 30
root           3       1  0 23:08 ?        00:00:00 ps -ef
"""


def test_a_shell_pid1_with_the_app_as_its_child_is_suspected(tmp_path: Path) -> None:
    p = tmp_path / "ps.txt"
    p.write_text(PS_SCRIPT)
    f = one(run([p]), "KP403")
    assert f.suspected and f.confidence == Confidence.LOW and f.severity == Severity.WARNING
    assert f.decided_by == ["cat /tmp/docker-entrypoint.sh", "time docker stop <container>"]
    assert [c.line for c in f.evidence] == [3, 4] and "PID 2: `sleep 30`" in f.summary


def _no_kp403(tmp_path: Path, listing: str) -> None:
    """A process listing, given alone, gives no KP403 finding."""
    p = tmp_path / "ps.txt"
    p.write_text(listing)
    assert [f for f in run([p]).findings if f.code == "KP403"] == []


def test_a_shell_pid1_that_traps_term_is_not_suspected(tmp_path: Path) -> None:
    _no_kp403(tmp_path, PS_TRAP)


def test_the_nodes_own_process_list_is_not_a_container(tmp_path: Path) -> None:
    _no_kp403(tmp_path, PS_SCRIPT.replace("$ docker exec web ps -ef", "$ ps -ef"))


# `ps -eo user,pid,args` run here inside `unshare -pf --mount-proc sh -c 'sleep 30 & ps -eo
# user,pid,args'`: Debian's dash as PID 1 of a new PID namespace, as a container shows it; pasted
# alone, with nothing saying where it was taken.
PS_BARE_SH_C = """\
USER         PID COMMAND
root           1 sh -c sleep 30 & ps -eo user,pid,args
root           2 sleep 30
root           3 ps -eo user,pid,args
"""


def test_a_listing_whose_pid1_is_a_shell_is_a_containers_and_its_script_decides(tmp_path: Path) -> None:
    """No command says where the listing was taken, but a node's PID 1 is its init: a shell as
    PID 1 is a container's. Its `-c` script is on the line (ps joins the words): with no trap on
    TERM, the shell that kept the application as its child is shown, not suspected."""
    p = tmp_path / "ps.txt"
    p.write_text(PS_BARE_SH_C)
    f = one(run([p]), "KP403")
    assert not f.suspected and f.confidence == Confidence.HIGH
    assert [c.line for c in f.evidence] == [2, 3] and "no `trap` on TERM" in f.summary
    _no_kp403(tmp_path, PS_BARE_SH_C.replace("sh -c sleep", 'sh -c trap "kill \\$p" TERM; sleep'))


def test_a_bare_listing_whose_pid1_is_an_init_is_the_nodes(tmp_path: Path) -> None:
    _no_kp403(tmp_path, PS_BARE_SH_C.replace("sh -c sleep 30 & ps -eo user,pid,args", "/sbin/init splash"))

"""KP402 grace-period-too-short: preStop hooks (in a spec, a fragment or a script of their own) that
do not fit in terminationGracePeriodSeconds."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import CASES, Diag, codes, deployment, deployment_of_43576, exec_hook, objects, of, run, service
from conftest import one

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.checks.termination.shutdown import prestop
from kpdoctor.model import Confidence, Severity


def test_prestop_longer_than_the_default_grace_period(tmp_path: Path) -> None:
    rep = run([objects(tmp_path, deployment("a", ["/app"], prestop=["sh", "-c", "sleep 30"]), service("a"))])
    f = one(rep, "KP402")
    assert "sleeps 30 s in preStop, and terminationGracePeriodSeconds is 30 (the default)" in f.summary
    assert "terminationGracePeriodSeconds: 45" in f.fix[0]
    ok = run([objects(tmp_path, deployment("a", ["/app"], prestop=["sleep", "30"], grace=60), service("a"))])
    assert "KP402" not in codes(ok)


# kubernetes/kubernetes#65496 (vojbarzz): the hook, as pasted from the Deployment, and its script
HOOK_65496 = '        lifecycle:\n          preStop:\n            exec:\n              command: ["/shutdown.sh"]\n'
SCRIPT_65496 = (
    "#!/bin/sh\n\nfor i in 1 2 3 4 5 6 7 8 9 10\ndo\n"
    '        echo "Shutdown $i " `date`  >> /data/shutdown.log\n        sleep 30\ndone\n'
)
# nginx/nginx-gateway-fabric#1171 docs: a lifecycle block that lost an indent in the paste
HOOK_NGF = '   lifecycle:\n   preStop:\n      exec:\n      command:\n      - /bin/sleep\n      - "40"\n'


def test_a_prestop_script_file_with_an_unbounded_wait(diagnose: Diag) -> None:
    """MeshWeaver#2043: the drain loop, given as preStop.sh, no Pod spec."""
    script = (CASES / "MeshWeaver-2043" / "preStop.sh").read_text()
    r = diagnose({"preStop.sh": script})
    (f,) = of(r, "KP402")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM
    assert "waits without a bound" in f.summary and "not given: the default, 30 s, assumed" in f.summary
    assert f.evidence[0].line == 1 and f.evidence[0].text.startswith("while ! curl")
    assert [i.kind for i in r.inputs] == [Kind.PRESTOP_SCRIPT.value]


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


def test_prestop_sleeping_the_whole_grace_period(diagnose: Diag) -> None:
    hook = exec_hook(["/bin/sh", "-c", "sleep 30; nginx -s quit"])  # k8s#20473, kfox1111
    (f,) = of(diagnose({"deploy.json": deployment_of_43576(hook)}), "KP402")
    assert f.severity == Severity.WARNING and f.confidence == Confidence.MEDIUM  # no Service: one step lower
    assert "sleeps 30 s in preStop, and terminationGracePeriodSeconds is 30 (the default)" in f.summary
    assert "No Service object was given" in f.summary


def test_a_prestop_loop_without_bound_ends_with_sigkill(diagnose: Diag) -> None:
    """MeshWeaver#2043: preStop polled /drain until the grace period killed the container."""
    script = (CASES / "MeshWeaver-2043" / "preStop.sh").read_text().strip()
    p = prestop({"lifecycle": exec_hook(["/bin/sh", "-c", script])})
    assert p.loop == script and p.seconds is None
    (f,) = of(diagnose({"deploy.json": deployment_of_43576(exec_hook(["/bin/sh", "-c", script]), grace=60)}), "KP402")
    assert f.severity == Severity.WARNING and "waits without a bound" in f.summary
    assert "terminationGracePeriodSeconds (60)" in f.summary and "timeout" in f.fix[0]


def test_a_loop_waiting_for_the_application_to_exit_is_its_shutdown(diagnose: Diag) -> None:
    """The Kubernetes docs' preStop for nginx: quit, then wait for nginx to be gone."""
    hook = exec_hook(["/bin/sh", "-c", "nginx -s quit; while killall -0 nginx; do sleep 1; done"])
    p = prestop({"lifecycle": hook})
    assert p.present and p.loop is None and p.seconds is None
    assert of(diagnose({"deploy.json": deployment_of_43576(hook)}), "KP402") == []

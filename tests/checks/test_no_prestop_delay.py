"""KP401 no-prestop-delay."""

from __future__ import annotations

from pathlib import Path

from checks.helpers import Diag, deployment, deployment_of_43576, objects, of, run, service
from conftest import one

from kpdoctor.model import Confidence, Severity


def test_no_prestop_is_info_naming_each_workload(tmp_path: Path) -> None:
    rep = run([objects(tmp_path, deployment("a", ["/app"]), deployment("b", ["/app"]), service("a"), service("b"))])
    f = one(rep, "KP401")
    assert f.severity == Severity.INFO
    assert "Deployment/shop/a (shop/a)" in f.summary and "Deployment/shop/b (shop/b)" in f.summary
    assert 'command: ["sleep", "5"]' in f.fix[0]


def test_workload_checks_run_without_a_service_and_say_so(diagnose: Diag) -> None:
    r = diagnose({"deploy.json": deployment_of_43576()})
    (f,) = of(r, "KP401")
    assert f.severity == Severity.INFO and f.confidence == Confidence.LOW
    assert "Deployment/zero-downtime-test (no Service given)" in f.summary
    assert "No Service object was given" in f.summary
    assert f.subject["service"] is None and f.subject["workload"] == "Deployment/zero-downtime-test"


# A preStop script written as a YAML folded scalar (`>`): its two lines become one command, and
# GNU sleep, given words that are no duration, exits at once: "sleep: invalid time interval
# '/usr/sbin/nginx'" (run here). The hook waits nothing and never tells nginx to quit.
FOLDED = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: nginx
          image: nginx
          lifecycle:
            preStop:
              exec:
                command:
                  - "sh"
                  - "-c"
                  - >
                    sleep 20
                    /usr/sbin/nginx -s quit
"""


def test_a_prestop_sleep_joined_to_the_next_command_waits_nothing(tmp_path: Path) -> None:
    p = tmp_path / "web.yaml"
    p.write_text(FOLDED)
    f = one(run([p]), "KP401")
    assert "fails at once: `sleep 20 /usr/sbin/nginx -s quit`" in f.summary
    p.write_text(FOLDED.replace("- >", "- |"))  # a literal block keeps the lines apart: 20 s
    assert [x for x in run([p]).findings if x.code == "KP401"] == []

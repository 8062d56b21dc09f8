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

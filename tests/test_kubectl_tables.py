"""`kubectl get pods [-A] [-o wide]` tables as users paste them (issue 15, part 1 "More shapes"):
with or without the header, grep'd, from `kubectl get all`. Real posted rows only (the corpus
cases named at each test)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import all_findings

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.model import Confidence, Finding, Report
from kpdoctor.parse.kubectl_table import pod_rows

Diag = Callable[..., Report]
CASES = Path(__file__).parent / "realworld" / "cases"
# rke2-1301: two kube-proxy Pods on node master (a static Pod and the chart's DaemonSet), no header
RKE2_1301 = (CASES / "rke2-1301" / "pods.txt").read_text()
# k8s-135266: the header of `kubectl get pod -owide`, as posted
WIDE_HEADER = (
    "NAME                               READY   STATUS        RESTARTS   AGE    IP             NODE             "
    "NOMINATED NODE   READINESS GATES\n"
)


def of(report: Report, code: str) -> list[Finding]:
    return [f for f in all_findings(report) if f.code == code]


def test_headerless_wide_rows_with_namespace_are_read() -> None:
    rows = pod_rows(RKE2_1301)
    assert [(r.namespace, r.name, r.status, r.node, r.line) for r in rows] == [
        ("kube-system", "kube-proxy-master", "Running", "master", 0),
        ("kube-system", "kube-proxy-p2vrt", "Running", "master", 1),
    ]


def test_two_kube_proxy_pods_running_on_one_node(diagnose: Diag) -> None:
    r = diagnose({"pods.txt": RKE2_1301, "kube-proxy.log": (CASES / "rke2-1301" / "kube-proxy.log").read_text()})
    (f,) = of(r, "KP109")
    assert f.cause == "multiple-kube-proxy" and f.confidence == Confidence.HIGH
    assert "2 kube-proxy Pods are Running on node master: kube-proxy-master, kube-proxy-p2vrt." in f.summary
    assert [(c.artifact.rsplit("/", 1)[-1], c.line) for c in f.evidence] == [("pods.txt", 1), ("pods.txt", 2)]
    assert "kube-proxy-master" in f.fix[0] and "static Pod" in f.fix[0]
    assert [i.kind for i in r.inputs] == [Kind.KUBECTL_PODS.value, Kind.KUBE_PROXY_LOG.value]


def test_with_its_header_and_without_the_namespace_column(diagnose: Diag) -> None:
    """The same rows as `kubectl -n kube-system get pods -o wide` prints them (no NAMESPACE column)."""
    rows = "".join(line.split(None, 1)[1] + "\n" for line in RKE2_1301.splitlines())
    r = diagnose({"pods.txt": WIDE_HEADER + rows})
    (f,) = of(r, "KP109")
    assert [c.line for c in f.evidence] == [2, 3]


def test_only_this_nodes_pods_count_when_the_node_is_known(diagnose: Diag) -> None:
    assert of(diagnose({"pods.txt": RKE2_1301}, node="worker-1"), "KP109") == []
    assert of(diagnose({"pods.txt": RKE2_1301}, node="master"), "KP109")


def test_rows_without_a_node_column_prove_nothing(diagnose: Diag) -> None:
    """rke2-1458: `kubectl get pods -n kube-system | grep kube-proxy`: six Pods, node not shown."""
    ev = load([CASES / "rke2-1458" / "pods.txt"])
    (art,) = ev.artifacts
    assert art.kind == Kind.KUBECTL_PODS and art.attrs["command"].startswith("kubectl get pods")
    rows = pod_rows(art.text)
    assert len(rows) == 6 and all(r.node is None for r in rows)
    assert of(diagnose({"pods.txt": (CASES / "rke2-1458" / "pods.txt").read_text()}), "KP109") == []


def test_a_terminating_pod_next_to_its_replacement_is_not_a_second_kube_proxy(diagnose: Diag) -> None:
    """A rolling update: the old Pod Terminating, the new one Running (rows of rke2-1301, one retyped)."""
    first, second = RKE2_1301.splitlines()
    rolling = first.replace("Running    ", "Terminating") + "\n" + second + "\n"
    assert of(diagnose({"pods.txt": rolling}), "KP109") == []


@pytest.mark.parametrize(
    "case,file",
    [
        ("k8s-135266", "kubectl-get-pod.txt"),  # an application's Pods, with the header
        ("community-5339", "kubectl.txt"),  # `kubectl get all` rows of flannel
    ],
)
def test_tables_of_other_pods_still_say_what_to_send(case: str, file: str) -> None:
    ev = load([CASES / case / file])
    assert not [a for a in ev.artifacts if a.kind == Kind.KUBECTL_PODS]


def test_a_table_without_kube_proxy_rows_keeps_the_kubectl_hint(tmp_path: Path) -> None:
    p = tmp_path / "pods.txt"
    p.write_text((CASES / "k8s-135266" / "kubectl-get-pod.txt").read_text().split("\n", 1)[1])  # without the prompt
    ev = load([p])
    assert not ev.artifacts and "a kubectl table" in ev.problems[0].message

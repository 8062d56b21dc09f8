"""Helpers shared by the per-cause tests in tests/checks and the theme files at tests/ they came from:
evidence builders, report filters and real posted inputs more than one file reads.

Import them as ``from checks.helpers import ...`` (tests/ is on the import path, as for conftest).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from conftest import DATA, all_findings, write

from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Finding, Report, Severity

Diag = Callable[..., Report]
REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "realworld" / "cases"
SEED2 = REPO / "src" / "kpdoctor" / "demo" / "bundles" / "config-ignores-hostname"
REAL_S = DATA / "iptables" / "real" / "legacy-S.txt"

# -- kube-proxy logs ---------------------------------------------------------------------------
GLOG_START = """\
I1008 21:01:50.100000  145725 server.go:548] Version: v1.18.4-tke.30
I1008 21:01:50.200000  145725 server_others.go:143] Using iptables Proxier.
"""

# -- seed 004's node evidence: counters, bundles, links, workloads ---------------------------------
CT_ROW = "cpu={cpu}   \tfound=0 invalid=3 insert=0 insert_failed={f} drop={d} early_drop={e} error=0 search_restart=2 clash_resolve=4 chaintoolong=0 \n"


def conntrack_s(insert_failed: int, drop: int = 0, early_drop: int = 0) -> str:
    half = insert_failed // 2
    return CT_ROW.format(cpu=0, f=half, d=drop, e=early_drop) + CT_ROW.format(cpu=1, f=insert_failed - half, d=0, e=0)


def bundle(tmp: Path, files: dict[str, str], times: dict[str, str] | None = None) -> Path:
    root = tmp / "bundle"
    arts = []
    for rel, text in files.items():
        write(root, rel, text)
        snap = rel.split("/")[2] if rel.startswith("node/counters/") else None
        entry: dict[str, object] = {"path": rel, "exit_code": 0}
        if snap and times:
            entry["collected_at"] = times[snap]
        arts.append(entry)
    (root / "manifest.json").write_text(json.dumps({"node": "node-1", "artifacts": arts}))
    return root


def run(paths: list[Path]) -> Report:
    return diagnose_paths(paths, min_severity=Severity.INFO)[0]


def codes(report: Report) -> set[str]:
    return {f.code for f in report.findings} | {g.code for f in report.findings for g in f.folded}


TIMES = {"T0": "2026-11-21T10:00:00Z", "T1": "2026-11-21T10:00:10Z"}


def _link(idx: int, name: str, mtu: int, kind: str | None, **extra: object) -> dict[str, object]:
    d: dict[str, object] = {
        "ifindex": idx,
        "ifname": name,
        "flags": ["BROADCAST", "UP", "LOWER_UP"],
        "mtu": mtu,
        "operstate": "UP",
    }
    if kind:
        d["linkinfo"] = {"info_kind": kind}
    d.update(extra)
    return d


IPVS_CONFIG = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n"


def deployment(
    name: str, command: list[str], *, prestop: list[str] | None = None, grace: int | None = None
) -> dict[str, object]:
    c: dict[str, object] = {"name": "app", "image": "example/app:1", "command": command}
    if prestop is not None:
        c["lifecycle"] = {"preStop": {"exec": {"command": prestop}}}
    spec: dict[str, object] = {"containers": [c]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def service(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"clusterIP": "10.96.1.1", "selector": {"app": name}, "ports": [{"port": 80}]},
    }


def objects(tmp: Path, *items: dict[str, object]) -> Path:
    return write(tmp, "objects.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": list(items)}))


# -- stopping containers, and Pod specs as users paste them ------------------------------------
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


# -- reports, corpus cases and k8s#43576's Deployment ----------------------------------------------
def of(report: Report, code: str) -> list[Finding]:
    return [f for f in all_findings(report) if f.code == code]


def case(name: str, *files: str) -> dict[str, str]:
    return {f: (CASES / name / f).read_text() for f in files}


def deployment_of_43576(lifecycle: dict[str, Any] | None = None, grace: int | None = None) -> str:
    """k8s#43576's Deployment (its Service document left out), optionally with a preStop hook."""
    docs = list(yaml.safe_load_all((CASES / "k8s-43576" / "zero-downtime-test.yaml").read_text()))
    dep = next(d for d in docs if d["kind"] == "Deployment")
    spec = dep["spec"]["template"]["spec"]
    if lifecycle is not None:
        spec["containers"][0]["lifecycle"] = lifecycle
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return json.dumps(dep)


def exec_hook(command: list[str]) -> dict[str, Any]:
    return {"preStop": {"exec": {"command": command}}}


# -- "has no local endpoints" rules (KP111, KP203) ---------------------------------------------
def nat_table(save: str) -> str:
    """The nat table of an iptables-save dump, whole lines only (header to COMMIT)."""
    lines = save.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln == "*nat")
    end = next(i for i in range(start, len(lines)) if lines[i] == "COMMIT")
    return "\n".join(lines[start - 1 : end + 1]) + "\n"


def kp111(report: Report) -> list[Finding]:
    return [f for f in all_findings(report) if f.code == "KP111"]


def note(report: Report) -> list[Finding]:
    """KP203's info note on "has no local endpoints" rules nothing decides."""
    return [f for f in all_findings(report) if f.code == "KP203" and f.severity == Severity.INFO]


# -- kube-proxy's configuration -------------------------------------------------------------
# k8s-98302 (kubernetes#98302): the config written from a heredoc, as posted.
HEREDOC_98302 = (
    "cat <<EOF > /tmp/kube-proxy.yaml\n"
    "apiVersion: kubeproxy.config.k8s.io/v1alpha1\n"
    "kind: KubeProxyConfiguration\n"
    "clientConnection:\n"
    "  kubeconfig: /var/run/kubernetes/kube-proxy.kubeconfig\n"
    "hostnameOverride: 127.0.0.1\n"
    "mode:\n"
    "featureGates:\n"
    "  AllAlpha: false\n"
    "EOF\n"
)

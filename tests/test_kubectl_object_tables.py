"""`kubectl get svc` and `kubectl get nodes` tables as users post them: read into the Services'
addresses and ports and the Nodes' addresses and versions (kubectl's printers: the titles
upper-cased, cells padded to three spaces, ``<none>`` for nothing), whatever the kubectl release
printed them (1.6 had no ROLES, 1.8 no INTERNAL-IP), and never taken for objects given whole.

The tables below are posted output, each from the thread named; the tables kubectl 1.20 prints
for a real apiserver are read in tests/lab/test_kubectl_tables_lab.py (Pod tables: tests/test_kubectl_tables.py).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from conftest import write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.model import Report
from kpdoctor.parse.kubectl_table import table_objects, table_rows

Diag = Callable[..., Report]

# kubernetes/kubernetes#57010 (kubectl 1.8: -o wide without INTERNAL-IP; an OS image with spaces)
WIDE_1_8 = """\
# kubectl get no -o wide
NAME      STATUS    ROLES     AGE       VERSION   EXTERNAL-IP   OS-IMAGE                       KERNEL-VERSION   CONTAINER-RUNTIME
uy02-07   Ready     <none>    4d        v1.8.4    <none>        Debian GNU/Linux 9 (stretch)   4.9.0-4-amd64    docker://Unknown
uy05-13   Ready     master    4d        v1.8.4    <none>        Debian GNU/Linux 9 (stretch)   4.9.0-4-amd64    docker://Unknown
uy08-07   Ready     <none>    4d        v1.8.4    <none>        Debian GNU/Linux 9 (stretch)   4.9.0-4-amd64    docker://Unknown
uy08-08   Ready     <none>    4d        v1.8.4    <none>        Debian GNU/Linux 9 (stretch)   4.9.0-4-amd64    docker://Unknown
"""

# kubernetes/kubernetes#54467 (kubectl 1.8: the Nodes without a header line's prompt, then a Service table)
NODES_AND_SERVICES = """\
NAME        STATUS      ROLES        AGE         VERSION
master      Ready         master         3h           v1.8.1
node1       Ready         <none>       3h           v1.8.1
node2       Ready         <none>       3h           v1.8.1

root@master:~/yml/1# kubectl get service
NAME              TYPE        CLUSTER-IP    EXTERNAL-IP   PORT(S)          AGE
kubernetes        ClusterIP   10.96.0.1     <none>        443/TCP          3h
my-service-name   NodePort    10.98.25.69   <none>        8080:30373/TCP   3m
"""

# kubernetes-sigs/cluster-api-provider-openstack#119 (a node NotReady)
NOT_READY = """\
root@openstack-master-bzzf6:/home/ubuntu# kubectl get nodes
NAME                     STATUS     ROLES    AGE    VERSION
openstack-master-bzzf6   Ready      master   132m   v1.12.1
openstack-node-ptbf6     NotReady   <none>   127m   v1.12.1
"""


def test_a_wide_node_table_of_any_release_gives_versions_and_kernel(tmp_path: Path) -> None:
    rows = table_rows(WIDE_1_8)
    assert [r.name for r in rows] == ["uy02-07", "uy05-13", "uy08-07", "uy08-08"]
    assert rows[0].cells["OS-IMAGE"] == "Debian GNU/Linux 9 (stretch)"
    info = table_objects(WIDE_1_8, "nodes.txt").items[1].body["status"]["nodeInfo"]
    assert info == {
        "kubeletVersion": "v1.8.4",
        "osImage": "Debian GNU/Linux 9 (stretch)",
        "kernelVersion": "4.9.0-4-amd64",
        "containerRuntimeVersion": "docker://Unknown",
    }
    facts = Facts(load([write(tmp_path, "nodes.txt", WIDE_1_8)]))
    assert [a.kind for a in facts.evidence.artifacts] == [Kind.KUBECTL_TABLE]
    kernel = facts.node_kernel  # every node runs the same kernel: this node's too
    assert kernel is not None and kernel.value.base == (4, 9, 0)
    assert kernel.cite.line == 3 and kernel.cite.text.startswith("uy02-07   Ready")
    # no INTERNAL-IP column: no address is made up
    assert list(facts.cluster.node_addresses()) == []


def test_a_node_named_by_the_user_is_read_from_its_own_row(tmp_path: Path) -> None:
    text = WIDE_1_8.replace("4.9.0-4-amd64    docker://Unknown\nuy05-13", "4.9.0-5-amd64    docker://Unknown\nuy05-13")
    path = write(tmp_path, "nodes.txt", text)
    assert Facts(load([path])).node_kernel is None  # two kernels, no node named: unknown
    facts = Facts(load([path]), node="uy05-13")
    kernel = facts.node_kernel
    assert kernel is not None and kernel.value.base == (4, 9, 0) and kernel.cite.text.startswith("uy05-13")


def test_service_and_node_tables_in_one_paste(tmp_path: Path) -> None:
    facts = Facts(load([write(tmp_path, "paste.txt", NODES_AND_SERVICES)]))
    assert {a.kind for a in facts.evidence.artifacts} == {Kind.KUBECTL_TABLE}
    services = {s.key: s for s in facts.cluster.services}
    assert services["my-service-name"].type == "NodePort"
    assert services["my-service-name"].node_ports == (30373,)
    assert services["kubernetes"].cluster_ips == ("10.96.0.1",)
    assert all(not s.external_ips for s in services.values())
    # partial objects: not the objects given whole (verified with their endpoints unknown)
    assert facts.objects.items == []
    assert [s.name for s in facts.dataplane_inputs().services()] == ["kubernetes", "my-service-name"]
    assert len(facts.table_objects.of("Node")) == 3


def test_tables_without_a_node_address_name_no_service_address_as_a_node_s(tmp_path: Path) -> None:
    report, _ = diagnose_paths([write(tmp_path, "paste.txt", NODES_AND_SERVICES + "\n" + NOT_READY)])
    assert [f.code for f in report.findings if f.code == "KP209"] == []  # no externalIPs at all


def test_the_rows_of_kubectl_get_w_keep_the_last_state(tmp_path: Path) -> None:
    watched = NOT_READY + "openstack-node-ptbf6     Ready   <none>   128m   v1.12.1\n"
    rows = {r.name: r.cells["STATUS"] for r in table_rows(watched)}
    assert rows == {"openstack-master-bzzf6": "Ready", "openstack-node-ptbf6": "Ready"}


def test_what_a_table_cannot_say_is_left_unsaid() -> None:
    text = (
        "NAME    TYPE           CLUSTER-IP     EXTERNAL-IP        PORT(S)         AGE\n"
        "front   LoadBalancer   10.0.171.239   a54f1b2c3d4e5f...   443:31000/TCP   5m\n"
        "db      ClusterIP      None           <none>             5432/TCP        5m\n"
        "pend    LoadBalancer   10.0.9.8       <pending>          80:30080/TCP    1m\n"
    )
    bodies = {o.name: o.body for o in table_objects(text, "svc.txt").items}
    # a load-balancer name clipped to 16 characters is not an address
    assert bodies["front"]["status"] == {"loadBalancer": {"ingress": []}}
    assert bodies["db"]["spec"]["clusterIP"] == "None"  # headless, as kubectl prints it
    assert bodies["pend"]["status"]["loadBalancer"]["ingress"] == []
    assert bodies["pend"]["spec"]["ports"] == [{"port": 80, "protocol": "TCP", "nodePort": 30080}]


# ipvsadm -Ln as printed (the banner and column header), then the same grep'd: `| grep -A1 30080`
IPVS_WHOLE = """\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.1:443 rr
  -> 192.168.56.10:6443           Masq    1      3          0
TCP  192.168.56.10:30080 rr
  -> 10.244.1.7:8080              Masq    1      0          0
"""
SVC = """\
NAME         TYPE        CLUSTER-IP     EXTERNAL-IP   PORT(S)        AGE
kubernetes   ClusterIP   10.96.0.1      <none>        443/TCP        5d
web          NodePort    10.96.14.20    <none>        80:30080/TCP   2m
"""


def test_a_service_the_whole_ipvs_table_lacks_is_missing_but_not_from_a_grep(diagnose: Diag) -> None:
    """The whole listing has no virtual server for web's ClusterIP: KP200. The same listing
    grep'd for the NodePort (or cut with "...") says nothing of what it left out."""
    r = diagnose({"svc.txt": SVC, "ipvsadm.txt": IPVS_WHOLE})
    (f,) = [f for f in r.findings if f.code == "KP200"]
    assert f.subject["service"] == "default/web" and "10.96.14.20:80" in f.summary
    grepped = "".join(ln + "\n" for ln in IPVS_WHOLE.splitlines()[5:])
    cut = "".join(ln + "\n" for ln in IPVS_WHOLE.splitlines()[:5]) + "...\n"
    for listing in (grepped, cut):
        assert [f for f in diagnose({"svc.txt": SVC, "ipvsadm.txt": listing}).findings if f.code == "KP200"] == []


def test_tables_of_one_width_pasted_together_are_not_taken_for_wrapped_lines(diagnose: Diag) -> None:
    """Two tables in one paste: the first's rows all end at the widest column, which looks like a
    hard wrap; rows whose cells start at the same columns are a table's, never joined."""
    nodes = NOT_READY.split("\n", 1)[1]
    r = diagnose({"paste.txt": SVC.replace("<none>        80", "10.0.0.9      80") + "\n" + nodes})
    assert [i.kind for i in r.inputs] == [Kind.KUBECTL_TABLE.value]
    assert "hard line breaks" not in r.inputs[0].describe()
    (f,) = [f for f in r.findings if f.code == "KP209"]
    assert f.suspected and "openstack-node-ptbf6" in f.summary

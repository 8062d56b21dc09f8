"""`kubectl get svc` and `kubectl get nodes` tables as users post them: read into the Services'
addresses and ports and the Nodes' addresses and versions (kubectl's printers: the titles
upper-cased, cells padded to three spaces, ``<none>`` for nothing), whatever the kubectl release
printed them (1.6 had no ROLES, 1.8 no INTERNAL-IP), and never taken for objects given whole.

The tables below are posted output, each from the thread named; the tables kubectl 1.20 prints
for a real apiserver are read in tests/lab/test_kubectl_tables_lab.py (Pod tables: tests/test_kubectl_tables.py).
"""

from __future__ import annotations

from pathlib import Path

from conftest import write

from kpdoctor.bundle.artifacts import Kind
from kpdoctor.bundle.loader import load
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.facts import Facts
from kpdoctor.parse.kubectl_table import table_objects, table_rows

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

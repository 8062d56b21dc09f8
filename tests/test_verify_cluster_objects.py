"""Cluster objects that are duplicated, malformed or ambiguous (D17): each is a problem the user
sees, with its file and line, and none is verified as if it were valid.

Every case is kube-proxy's own upstream fixture (TestOverallIPTablesRules: its nft rules and the
cluster they were generated from) with the cluster file mutated the way a hand edit, a second
export or a broken tool mutates it."""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import UPSTREAM

from kpdoctor.cli import app
from kpdoctor.parse.k8s import parse_objects

runner = CliRunner()
BASE = UPSTREAM / "iptables" / "TestOverallIPTablesRules"
SAVE = str(BASE.with_suffix(".nft.save"))
Doc = dict[str, Any]


def cluster() -> Doc:
    doc: Doc = json.loads(BASE.with_suffix(".cluster.json").read_text())
    return doc


def item(doc: Doc, kind: str, name: str) -> Doc:
    found: Doc = next(i for i in doc["items"] if i["kind"] == kind and i["metadata"]["name"] == name)
    return found


def svc1(doc: Doc) -> Doc:
    return item(doc, "Service", "svc1")


def slice1(doc: Doc) -> Doc:
    return item(doc, "EndpointSlice", "svc1-1")


def write(tmp: Path, doc: object, name: str = "cluster.json") -> str:
    p = tmp / name
    p.write_text(json.dumps(doc, indent=1))
    return str(p)


def line_of(path: str, pattern: str, nth: int = 1) -> int:
    hits = [i for i, x in enumerate(Path(path).read_text().splitlines(), 1) if re.search(pattern, x)]
    return hits[nth - 1]


def verify(*args: str) -> tuple[int, Doc, str]:
    r = runner.invoke(app, ["verify", SAVE, *args, "--format", "json"])
    assert "internal error" not in r.output and "Traceback" not in r.output, r.output
    if "{" not in r.output:
        return r.exit_code, {}, r.output
    doc: Doc = json.loads(r.output[r.output.index("{") : r.output.rindex("}") + 1])
    return r.exit_code, doc, r.output


def problems(doc: Doc) -> list[str]:
    return [p["message"] for p in doc["input_problems"]]


def rows(doc: Doc, service: str) -> list[Doc]:
    return [x for x in doc["verification"]["results"] if x["service"] == service]


# -- Nodes --------------------------------------------------------------------------------------


def test_an_identical_duplicate_node_is_one_node(tmp_path: Path) -> None:
    doc = cluster()
    doc["items"] += [copy.deepcopy(i) for i in doc["items"] if i["kind"] == "Node"]
    code, out, _ = verify(write(tmp_path, doc))
    assert code == 0 and out["subject"]["node"] == "test-node"
    assert out["verification"]["ok"] == 20 and out["verification"]["uncertain"] == 0


def test_a_node_in_two_files_is_one_node(tmp_path: Path) -> None:
    doc = cluster()
    nodes = {"kind": "List", "apiVersion": "v1", "items": [i for i in doc["items"] if i["kind"] == "Node"]}
    code, out, _ = verify(write(tmp_path, doc), write(tmp_path, nodes, "nodes.json"))
    assert code == 0 and out["verification"]["ok"] == 20


def two_nodes(tmp: Path) -> str:
    doc = cluster()
    other = copy.deepcopy(item(doc, "Node", "test-node"))
    other["metadata"]["name"] = "other-node"
    doc["items"].append(other)
    return write(tmp, doc)


def test_two_nodes_without_node_say_give_node_and_exit_3(tmp_path: Path) -> None:
    path = two_nodes(tmp_path)
    code, out, _ = verify(path)
    assert code == 3  # partly uncertain, nothing mismatched: not clean
    want = "2 Nodes in the evidence: give --node NAME (other-node, test-node)"
    assert want in problems(out)
    unsure = [x for x in out["verification"]["results"] if x["status"] == "uncertain"]
    assert len(unsure) == out["verification"]["uncertain"] == 11
    assert all(want in x["note"] for x in unsure) and not any("no Node object" in x["note"] for x in unsure)
    r = runner.invoke(app, ["verify", SAVE, path])
    assert r.exit_code == 3 and "inconclusive: 11 of 20 results uncertain" in r.output
    code, out, _ = verify(path, "--node", "test-node")
    assert code == 0 and out["verification"]["ok"] == 20 and not problems(out)


def test_a_node_name_that_is_in_no_node_object_is_said(tmp_path: Path) -> None:
    code, out, _ = verify(str(BASE.with_suffix(".cluster.json")), "--node", "typo-node")
    assert code == 3
    assert "no Node named typo-node in the evidence (Nodes: test-node)" in problems(out)
    notes = {x["note"] for x in out["verification"]["results"] if x["status"] == "uncertain"}
    assert notes and all("no Node named typo-node" in n for n in notes)


# -- Services -----------------------------------------------------------------------------------

BAD_SERVICES: dict[str, tuple[Callable[[Doc], None], str]] = {
    "port -1": (lambda d: svc1(d)["spec"]["ports"][0].update(port=-1), "port -1 is out of range (1-65535)"),
    "port 10^12": (
        lambda d: svc1(d)["spec"]["ports"][0].update(port=10**12),
        "port 1000000000000 is out of range (1-65535)",
    ),
    "port not a number": (lambda d: svc1(d)["spec"]["ports"][0].update(port="http"), 'port "http" is not a number'),
    "unknown protocol": (
        lambda d: svc1(d)["spec"]["ports"][0].update(protocol="QUIC"),
        'protocol "QUIC" is not one kube-proxy programs (TCP, UDP, SCTP)',
    ),
    "clusterIP not an IP": (
        lambda d: svc1(d)["spec"].update(clusterIP="not-an-ip", clusterIPs=["not-an-ip"]),
        'clusterIP "not-an-ip" is not an IP address',
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SERVICES))
def test_a_service_port_the_api_would_refuse_is_uncertain_not_missing(tmp_path: Path, case: str) -> None:
    mutate, phrase = BAD_SERVICES[case]
    doc = cluster()
    mutate(doc)
    path = write(tmp_path, doc)
    line = line_of(path, r'"name": "svc1"')
    code, out, _ = verify(path)
    assert code == 3
    assert not out["findings"], [f["code"] for f in out["findings"]]  # no KP200 "rules missing", no KP201
    assert any(p.startswith(f"{path} line {line}: Service ns1/svc1: ") and phrase in p for p in problems(out))
    mine = rows(out, "ns1/svc1")
    assert mine and all(x["status"] == "uncertain" for x in mine)
    assert all(f"Service ns1/svc1 ({path} line {line}): {phrase}" in x["note"] for x in mine)
    assert out["verification"]["ok"] == 18 and out["verification"]["mismatches"] == 0


@pytest.mark.parametrize(
    ("case", "phrase"),
    [
        ("no spec", "has no spec: not verified"),
        ("spec not an object", "spec is str, not dict: read as absent"),
        ("no ports", "has no ports: nothing to verify"),
        ("a null port", "port entry 2 is null, not a port: not verified"),
    ],
)
def test_a_service_without_spec_or_ports_is_reported_and_not_clean(tmp_path: Path, case: str, phrase: str) -> None:
    doc = cluster()
    spec = svc1(doc)["spec"]
    if case == "no spec":
        del svc1(doc)["spec"]
    elif case == "spec not an object":
        svc1(doc)["spec"] = "oops"
    elif case == "no ports":
        del spec["ports"]
    else:
        spec["ports"].append(None)
    path = write(tmp_path, doc)
    code, out, _ = verify(path)
    line = line_of(path, r'"name": "svc1"')
    assert f"{path} line {line}: Service ns1/svc1: {phrase}" in problems(out)
    assert not out["findings"]  # its rules are not "stale" because its object is broken
    if case == "a null port":
        assert code == 0  # the port that is there verifies
    else:
        assert code == 3 and out["verification"]["unverified"][0]["service"] == "ns1/svc1"


def test_a_service_without_metadata_is_reported(tmp_path: Path) -> None:
    doc = cluster()
    del svc1(doc)["metadata"]
    code, out, _ = verify(write(tmp_path, doc))
    assert any("Service without metadata.name (object 1 of the file): not verified" in p for p in problems(out))
    assert not rows(out, "default/") and not out["findings"]  # its rules are not "stale" either
    assert code == 3 and out["verification"]["unverified"][0]["reason"] == "no metadata.name"


def test_an_identical_duplicate_service_is_verified_once(tmp_path: Path) -> None:
    doc = cluster()
    doc["items"].append(copy.deepcopy(svc1(doc)))
    code, out, _ = verify(write(tmp_path, doc))
    assert code == 0 and out["verification"]["services_checked"] == 6 and out["verification"]["ok"] == 20
    assert not problems(out)


def test_a_duplicate_service_with_another_cluster_ip_is_reported_as_a_duplicate(tmp_path: Path) -> None:
    doc = cluster()
    ghost = copy.deepcopy(svc1(doc))
    ghost["spec"].update(clusterIP="172.30.0.99", clusterIPs=["172.30.0.99"])
    doc["items"].append(ghost)
    path = write(tmp_path, doc)
    first, second = line_of(path, r'"name": "svc1"'), line_of(path, r'"name": "svc1"', 2)
    code, out, _ = verify(path)
    assert code == 0 and not out["findings"]  # no KP200 for the ghost's address
    assert (
        f"{path} line {second}: Service ns1/svc1 is in the evidence twice with different clusterIP "
        f'"172.30.0.41" vs "172.30.0.99" ({path} line {first}; {path} line {second}): '
        f"using the one at {path} line {first} (first given)"
    ) in problems(out)
    assert out["verification"]["services_checked"] == 6


def test_the_newer_copy_of_a_service_is_the_one_verified(tmp_path: Path) -> None:
    doc = cluster()
    old = copy.deepcopy(svc1(doc))
    old["spec"].update(clusterIP="172.30.0.99", clusterIPs=["172.30.0.99"])
    old["metadata"]["resourceVersion"] = "100"
    svc1(doc)["metadata"]["resourceVersion"] = "200"
    doc["items"].insert(0, old)
    code, out, _ = verify(write(tmp_path, doc))
    assert code == 0 and "newer resourceVersion" in " ".join(problems(out))
    assert {x["destination"] for x in rows(out, "ns1/svc1")} == {"172.30.0.41:80"}


# -- EndpointSlices -----------------------------------------------------------------------------


@pytest.mark.parametrize(("address", "shown"), [("999.1.1.1", '"999.1.1.1"'), ("", '""'), (None, "null")])
def test_an_endpoint_address_that_is_none_is_reported_and_uncertain(
    tmp_path: Path, address: str | None, shown: str
) -> None:
    doc = cluster()
    slice1(doc)["endpoints"][0]["addresses"] = [address]
    path = write(tmp_path, doc)
    line = line_of(path, r'"name": "svc1-1"')
    code, out, _ = verify(path)
    assert code == 3 and not out["findings"]  # no KP202 "endpoints out of sync" from a broken slice
    assert f"{path} line {line}: EndpointSlice ns1/svc1-1: endpoint address(es) {shown}: not IPv4 addresses: " in (
        " ".join(problems(out))
    )
    mine = rows(out, "ns1/svc1")
    assert mine and all(x["status"] == "uncertain" and f"EndpointSlice svc1-1 ({path} line {line})" in x["note"] for x in mine)


def test_a_slice_without_ports_is_reported_and_said_in_the_results(tmp_path: Path) -> None:
    doc = cluster()
    del slice1(doc)["ports"]
    path = write(tmp_path, doc)
    line = line_of(path, r'"name": "svc1-1"')
    _, out, _ = verify(path)
    said = f"EndpointSlice svc1-1 ({path} line {line}) has no ports: kube-proxy takes none of its endpoints"
    assert f"{path} line {line}: EndpointSlice ns1/svc1-1: has no ports: kube-proxy takes none of its endpoints" in (
        problems(out)
    )
    assert all(said in x["note"] for x in rows(out, "ns1/svc1"))


# -- files that hold nothing usable -------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ({"apiVersion": "v1", "kind": "List", "items": None}, "`items` is null"),
        ({"apiVersion": "v1", "kind": "List", "items": [{"metadata": {"name": "x"}}] * 3}, "3 item(s) without `kind`"),
    ],
)
def test_a_cluster_file_with_no_usable_object_says_so(tmp_path: Path, doc: Doc, why: str) -> None:
    path = write(tmp_path, doc)
    r = runner.invoke(app, ["verify", SAVE, path])
    assert r.exit_code == 2
    assert f"{path}: the file held no usable Kubernetes object: {why}" in r.output
    assert "needs the node's rules" in r.output and "the cluster's Services together" in r.output


def test_yaml_nested_deeply_is_one_line_and_quick(tmp_path: Path) -> None:
    p = tmp_path / "deep.yaml"
    p.write_text("apiVersion: v1\nkind: List\nitems: " + "[" * 20000 + "]" * 20000 + "\n")
    t0 = time.monotonic()
    objs = parse_objects(p.read_text(), str(p))
    assert time.monotonic() - t0 < 3
    assert [str(d) for d in objs.diagnostics] == [f"{p}: YAML nested more than 256 levels deep: not read"]


def test_json_with_a_bom_and_a_concatenated_dump_are_read() -> None:
    text = BASE.with_suffix(".cluster.json").read_text()
    assert len(parse_objects("\ufeff" + text, "c.json").items) == 12
    one = json.dumps(svc1(cluster()), indent=1)
    objs = parse_objects(one + "\n" + one.replace('"svc1"', '"svc9"'), "dump.json")
    assert [o.name for o in objs.items] == ["svc1", "svc9"] and not objs.diagnostics
    objs = parse_objects(one + "\n" + "[" * 5000 + "]" * 5000, "dump.json", 10)
    assert [o.name for o in objs.items] == ["svc1"]
    assert [str(d) for d in objs.diagnostics] == [
        f"dump.json line {10 + one.count(chr(10)) + 1}: JSON nested too deeply to read (about 1,000 levels or more)"
    ]

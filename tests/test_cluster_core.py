"""The core reads a cluster's bulk as the Python readers do (rust/src/cluster.rs).

Where each object's name stands in a JSON listing, what the API server would have refused in an
EndpointSlice's endpoints, and which endpoints kube-proxy takes from it: the core does each of
these for the 50,000 endpoints of a 10,000-Service cluster, and Python does them without the core.
A verification must not depend on which one read the objects, so both are run here on every
JSON and EndpointSlice in the tests' data, on a generated cluster, and on hostile values.
"""

from __future__ import annotations

import json
import random
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from kpdoctor.dataplane import expected
from kpdoctor.parse import k8s

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "bench"))
from gen_cluster import _cluster, _services  # noqa: E402

core = pytest.importorskip("kpdoctor._core")


def _json_texts() -> list[tuple[str, str]]:
    out = []
    for p in sorted(HERE.rglob("*.json")):
        text = p.read_text(errors="replace")
        if text.lstrip().startswith(("{", "[")) and len(text) < 5_000_000:
            out.append((str(p.relative_to(HERE)), text))
    out.append(("generated", json.dumps(_cluster(_services(200, 5)), indent=2)))
    return out


def _names_in_order(text: str) -> list[str]:
    """The names a read asks for, in document order, with names no object has between them."""
    got = k8s.parse_objects(text, "x.json")
    names = [o.name for o in got.items if o.name]
    return [n for name in names for n in (name, "not-there", name)]


@pytest.mark.parametrize("where, text", _json_texts(), ids=lambda v: v if len(v) < 60 else "")
def test_name_lines_of_every_json_in_the_tests_are_the_python_readers(where: str, text: str) -> None:
    py, native = k8s._NameLines(text, True), core.NameLines(text)
    for name in _names_in_order(text):
        assert native.next(name) == py.next(name), (where, name)


NAME_PIECES = [
    '"name"',
    '"name": "a"',
    '"name" :\t"b"',
    '"name":\n"c"',
    '"name":"',
    '"name": "x\\"y"',
    '"name": "x\\\ny"',
    '"name": "\\u00e9t\\u00e9"',
    '"name": "été"',
    '"name":\x1c"fs"',
    '"name":\u3000"ideo"',
    '"name": 5',
    "\n",
    " ",
    '"nam"',
    '{"metadata": {"name": "a"}}',
    '"name": "a\\',
    '"name": "\\\\"',
    '"names": "no"',
    "é",
    "\r\n",
]


def test_name_lines_agree_on_hostile_texts() -> None:
    rnd = random.Random(42)
    for _ in range(3000):
        text = "".join(rnd.choice(NAME_PIECES) for _ in range(rnd.randrange(1, 14)))
        py, native = k8s._NameLines(text, True), core.NameLines(text)
        for _ in range(6):
            name = rnd.choice(["a", "b", "c", 'x\\"y', "\\u00e9t\\u00e9", "été", "fs", "ideo", "\\\\", "zzz", ""])
            assert native.next(name) == py.next(name), (text, name)


def _all_slices() -> list[dict[str, Any]]:
    out = []
    for _, text in _json_texts():
        out.extend(o.body for o in k8s.parse_objects(text, "x.json").items if o.kind == "EndpointSlice")
    for p in sorted(HERE.rglob("*.yaml")):
        text = p.read_text(errors="replace")
        if "EndpointSlice" in text and len(text) < 2_000_000:
            out.extend(o.body for o in k8s.parse_objects(text, "x.yaml").items if o.kind == "EndpointSlice")
    return out


VALUES: list[Any] = [
    None,
    "",
    0,
    1,
    True,
    False,
    1.5,
    "10.0.0.1",
    "10.0.0.01",
    "010.0.0.1",
    "1.2.3",
    "1.2.3.4.5",
    "256.1.1.1",
    "0.0.0.0",
    "255.255.255.255",
    " 10.0.0.1",
    "10.0.0.1\x00",
    "١٠.٠.٠.١",
    "::1",
    "fd00::5",
    "fe80::1%eth0",
    "::ffff:10.0.0.1",
    "1.2.3.4/32",
    "x" * 50,
    [],
    {},
    ["10.0.0.2"],
    {"ip": "10.0.0.3"},
    "None",
]


def _hostile_endpoint(rnd: random.Random) -> Any:
    if rnd.random() < 0.05:
        return rnd.choice(VALUES)
    ep: dict[str, Any] = {}
    r = rnd.random()
    if r < 0.7:
        ep["addresses"] = [rnd.choice(VALUES) for _ in range(rnd.randrange(0, 3))]
    elif r < 0.85:
        ep["addresses"] = rnd.choice(VALUES)
    if rnd.random() < 0.7:
        ep["conditions"] = (
            {
                k: rnd.choice([None, True, False, 0, 1, "", "yes", []])
                for k in ("ready", "serving", "terminating")
                if rnd.random() < 0.7
            }
            if rnd.random() < 0.9
            else rnd.choice(VALUES)
        )
    if rnd.random() < 0.5:
        ep["nodeName"] = rnd.choice(["node-a", "", None, 5, "node-b"])
    if rnd.random() < 0.3:
        ep["topology"] = rnd.choice([{"kubernetes.io/hostname": rnd.choice(["node-c", "", None, 7])}, "t", None])
    if rnd.random() < 0.3:
        ep["hints"] = rnd.choice(
            [
                {
                    "forZones": [
                        rnd.choice([{"name": "z1"}, {"name": None}, {}, "z", {"name": 3}])
                        for _ in range(rnd.randrange(0, 3))
                    ]
                },
                {"forZones": None},
                {"forZones": "z"},
                {},
                "h",
                None,
            ]
        )
    return ep


def _hostile_slices(n: int, seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        out.append(
            {
                "kind": "EndpointSlice",
                "addressType": rnd.choice(["IPv4", "IPv6", "FQDN", None, 4]),
                "metadata": {"name": f"s{i}", "labels": {"kubernetes.io/service-name": "svc"}},
                "ports": [{"name": "", "port": rnd.choice([80, -1, None, "80"]), "protocol": "TCP"}],
                "endpoints": rnd.choice([[_hostile_endpoint(rnd) for _ in range(rnd.randrange(0, 6))], None, "e", {}]),
            }
        )
    return out


def _without_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(k8s, "_slice_address_problems", None)
    monkeypatch.setattr(expected, "_slice_endpoints", None)


def _read(body: dict[str, Any], family: int) -> tuple[list[str], list[tuple[Any, ...]], list[str], list[str]]:
    obj = k8s.K8sObject("EndpointSlice", "discovery.k8s.io/v1", "default", "s", body, "x", 1)
    problems: list[str] = []
    notes: list[str] = []
    eps = expected._endpoints_from_slices([obj], "", "TCP", family, problems, notes)
    rows = [(e.ip, e.port, e.node, e.ready, e.serving, e.terminating, e.zones, e.addr) for e in eps]
    return k8s._slice_problems(body), rows, problems, notes


def test_slices_read_alike_with_and_without_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    slices = _all_slices() + _hostile_slices(3000, 7)
    assert len(slices) > 3000
    with_core = [_read(b, f) for b in slices for f in (4, 6)]
    _without_core(monkeypatch)
    assert [_read(b, f) for b in slices for f in (4, 6)] == with_core
    assert any(r[1] for r in with_core) and any(r[0] for r in with_core), "both kinds of result were met"


def test_the_cores_ipv4_test_is_inet_ptons() -> None:
    """The core decides dotted IPv4 texts itself; every such text reads as inet_pton reads it."""
    rnd = random.Random(3)
    pieces = ["0", "1", "00", "01", "9", "10", "99", "100", "199", "255", "256", "300", "999", "1000", "", "."]
    texts = [
        "".join(rnd.choice(pieces) + rnd.choice([".", "", "."]) for _ in range(rnd.randrange(1, 6)))
        for _ in range(20000)
    ]
    bodies = [{"endpoints": [{"addresses": [t]}]} for t in texts]
    native = [core.slice_address_problems(b["endpoints"], 4, k8s.is_ip) for b in bodies]
    for t, got in zip(texts, native, strict=True):
        try:
            socket.inet_pton(socket.AF_INET, t)
            ok = True
        except OSError:
            ok = False
        assert (got == []) == ok, t

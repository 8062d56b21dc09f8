"""Read objects share their equal values (rust/src/share.rs): memory, with the values unchanged.

A large cluster's EndpointSlices repeat the same conditions, ports, node names and API versions
hundreds of thousands of times. After ``parse_objects`` an equal leaf (a dict or list of plain
values) is one object, and every object reads exactly as ``json.loads`` / YAML gave it.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from kpdoctor.parse import k8s

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "bench"))
from gen_cluster import _cluster, _services  # noqa: E402

core = pytest.importorskip("kpdoctor._core")


def _generated(n: int) -> str:
    return json.dumps(_cluster(_services(n, 5)))


def _walk(v: Any) -> list[Any]:
    out = [v]
    if isinstance(v, dict):
        for x in v.values():
            out.extend(_walk(x))
    elif isinstance(v, list):
        for x in v:
            out.extend(_walk(x))
    return out


def test_a_generated_cluster_reads_as_json_gave_it_with_each_equal_leaf_once() -> None:
    text = _generated(300)
    objs = k8s.parse_objects(text, "cluster.json")
    plain = json.loads(text)["items"]
    assert [o.body for o in objs.items] == plain  # every value as parsed
    slices = [o.body for o in objs.items if o.kind == "EndpointSlice"]
    conditions = [e["conditions"] for s in slices for e in s["endpoints"]]
    assert len(conditions) == 1500
    assert len({id(c) for c in conditions}) == 1, "one object for the 1,500 equal conditions"
    ports = [s["ports"][0] for s in slices]
    assert len({id(p) for p in ports}) == 1
    versions = {id(s["apiVersion"]) for s in slices}
    assert len(versions) == 1
    nodes = {e["nodeName"]: id(e["nodeName"]) for s in slices for e in s["endpoints"]}
    assert len(set(nodes.values())) == len(nodes), "one string per node name"
    # what differs stays apart
    addresses = [e["addresses"] for s in slices for e in s["endpoints"]]
    assert len({id(a) for a in addresses}) == len({json.dumps(a) for a in addresses})


def test_fewer_objects_are_alive_after_a_read() -> None:
    text = _generated(500)
    before = {id(v) for v in _walk(json.loads(text)["items"])}
    after = {id(v) for v in _walk([o.body for o in k8s.parse_objects(text, "c.json").items])}
    assert len(after) < 0.75 * len(before)


def test_only_exact_equal_values_are_shared() -> None:
    docs: list[Any] = json.loads(
        '[{"a": 1}, {"a": true}, {"a": 1.0}, {"a": 1}, {"b": [1, 2]}, {"b": [2, 1]}, {"b": [1, 2]},'
        ' {"c": 99999999999999999999999}, {"c": 99999999999999999999999}, {"d": 0}, {"d": 0},'
        ' {"e": "\\ud800"}, {"e": "\\ud800"}, {"f": {"1": 1}}, {"f": {"1": 1}}, {"g": 8080}, {"h": 8080}]'
    )
    docs[9]["d"], docs[10]["d"] = float("nan"), float("nan")  # two objects (json.loads gives one NaN)
    copy = json.loads(json.dumps(docs))
    core.share_values([docs], False)
    assert docs[0] is docs[3]  # an equal leaf in a list: one object
    assert docs[15]["g"] is docs[16]["h"]  # equal numbers: one object
    assert docs[1]["a"] is True and type(docs[2]["a"]) is float  # 1, True and 1.0 stay apart
    assert docs[4]["b"] is docs[6]["b"] and docs[4]["b"] is not docs[5]["b"]  # order counts
    assert docs[7]["c"] == docs[8]["c"] == 99999999999999999999999  # beyond 64 bits: left alone
    assert math.isnan(docs[9]["d"]) and docs[9]["d"] is not docs[10]["d"]  # NaN is never equal: not shared
    assert docs[11]["e"] == "\ud800"  # no text: left as it is
    assert docs[13]["f"] is docs[14]["f"]
    # the documents hold what they held, item by item
    assert json.dumps(docs) == json.dumps(copy)


def test_yaml_anchors_and_a_recursive_alias_are_walked_once() -> None:
    text = (
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  namespace: x\n  labels: &l {app: web, tier: fe}\n"
        "spec:\n  selector: *l\n  ports: [{port: 80, protocol: TCP}]\n  clusterIP: 10.0.0.1\n"
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: loop, namespace: x}\ndata: &d {self: x}\n"
    )
    objs = k8s.parse_objects(text, "svc.yaml")
    svc = next(o for o in objs.items if o.kind == "Service")
    assert svc.body["spec"]["selector"] == {"app": "web", "tier": "fe"}
    loop: list[Any] = []
    loop.append(loop)
    roots: list[Any] = [{"a": loop, "b": loop}]
    assert core.share_values(roots, True) == 0  # a list holding itself: walked once, nothing to share


def test_deep_documents_are_left_below_the_walks_depth() -> None:
    deep: Any = {"v": "x"}
    for _ in range(500):
        deep = {"k": deep}
    other: Any = {"v": "x"}
    core.share_values([[deep, other]], False)
    inner = deep
    for _ in range(500):
        inner = inner["k"]
    assert inner == {"v": "x"}


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down (1, 1.0 and True are three values here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return bool(a == b)


def _agrees(text: str) -> bool:
    """The core's reading of ``text`` is json.loads's, or the core leaves it to json.loads (None);
    True when the core read it."""
    try:
        want: Any = json.loads(text)
        refused = False
    except (ValueError, RecursionError):
        refused = True
    got = core.load_json(text)
    if got is None:
        return False
    assert not refused, f"the core read what json.loads refuses: {text[:200]!r}"
    assert _same(got[0], want), f"read otherwise than json.loads: {text[:200]!r}"
    return True


def test_the_core_reads_every_json_file_of_the_tests_as_json_loads() -> None:
    files = sorted(HERE.rglob("*.json"))
    read = sum(_agrees(p.read_text(encoding="utf-8", errors="surrogateescape")) for p in files)
    assert read >= len(files) * 0.9
    assert _agrees(_generated(50))


_PIECES = [
    '"',
    "\\",
    "\\u",
    "d83d",
    "de00",
    "dc00",
    "\\n",
    "\\x",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "\n",
    "\x0b",
    "0",
    "-",
    "1",
    ".",
    "e",
    "E",
    "+",
    "00",
    "-0",
    "1e400",
    "9223372036854775808",
    "-9223372036854775809",
    "true",
    "null",
    "NaN",
    "Infinity",
    "-Infinity",
    "tru",
    '"é"',
    '"\\ud83d\\ude00"',
    '"\\ud800"',
    "\x01",
]
_SCALARS = [
    "0",
    "-0",
    "1",
    "-12",
    "3.25",
    "1e5",
    "-2.5E-3",
    "123456789012345678901234567890",
    "5e-324",
    "1.7976931348623157e308",
    "true",
    "false",
    "null",
    '"x"',
    '"\\u00e9\\n\\/"',
    '"\\ud83d\\ude00"',
    '"a\\"b"',
    '""',
    '"' + "y" * 300 + '"',
    "NaN",
]


def _random_json(rnd: random.Random, depth: int = 0) -> str:
    r = rnd.random()
    if depth > 5 or r < 0.3:
        return rnd.choice(_SCALARS)
    if r < 0.65:
        return (
            "["
            + rnd.choice([",", ", ", " ,\n"]).join(_random_json(rnd, depth + 1) for _ in range(rnd.randint(0, 5)))
            + "]"
        )
    keys = [
        rnd.choice(['"a"', '"b"', '"ready"', '"k\\u0041"', '"' + "z" * 300 + '"']) for _ in range(rnd.randint(0, 5))
    ]
    return "{" + ",".join(f"{k}{rnd.choice([':', ' : '])}{_random_json(rnd, depth + 1)}" for k in keys) + "}"


def test_the_core_reads_random_and_broken_json_as_json_loads_or_leaves_it() -> None:
    rnd = random.Random(42)
    read = 0
    for _ in range(4000):
        text = list(_random_json(rnd))
        if rnd.random() < 0.5:  # broken: pieces inserted, removed, replaced
            for _ in range(rnd.randint(1, 3)):
                if not text:
                    break
                at = rnd.randint(0, len(text) - 1)
                op = rnd.random()
                if op < 0.4:
                    text[at:at] = [rnd.choice(_PIECES)]
                elif op < 0.7:
                    del text[at]
                else:
                    text[at] = rnd.choice(_PIECES)
        read += _agrees(rnd.choice(["", " ", "\n"]) + "".join(text) + rnd.choice(["", " \n", " x"]))
    assert read > 500  # most broken ones and those with NaN or a lone surrogate are json.loads's
    assert not _agrees("[" * 600 + "]" * 600)  # deeper than the core reads: json.loads's
    assert _agrees("[" * 100 + "]" * 100)


def test_a_malformed_part_of_a_shared_value_is_dropped_from_each_object_alone() -> None:
    meta = '{"name": "same", "namespace": "x", "labels": "oops"}'
    text = (
        '{"kind": "List", "apiVersion": "v1", "items": ['
        f'{{"kind": "ConfigMap", "apiVersion": "v1", "metadata": {meta}}},'
        f'{{"kind": "Secret", "apiVersion": "v1", "metadata": {meta}}}]}}'
    )
    objs = k8s.parse_objects(text, "l.json")
    assert [o.body["metadata"] for o in objs.items] == [{"name": "same", "namespace": "x"}] * 2
    said = [str(d) for d in objs.diagnostics if "labels is str" in str(d)]
    assert len(said) == 2, said  # each object's own problem, though they shared the value as read

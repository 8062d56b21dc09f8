"""A huge cluster costs the agent its objects' JSON, in pages (issue 36, item 9).

A loopback API server (``kubeapi_replay.BulkServer``) serves N Services and their EndpointSlices
shaped as kube-apiserver returns them (``managedFields``, kubectl's last-applied annotation,
``targetRef``\\ s). The agent's list-and-watch runs in a child process (its own resident size,
not the test's): every list is read in pages of 500 with their continue tokens, and the resident
memory the lists add stays within 3 KB per Service and its slice (300 MB per 100,000 Services),
at each size. ``collect_cluster`` pages the same way and trims the same fields.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubeapi_replay import BULK_NODE, BulkServer, bulk_objects
from test_collect_cluster import write_kubeconfig

from kpdoctor.collect.cluster import collect_cluster
from kpdoctor.collect.record import Budget

PER_SERVICE = 3 * 1024  # bytes of resident memory a Service and its EndpointSlice may add, listed
SLACK = 32 * 1024**2  # the pages in flight (two lists at once), the allocator's arenas: what does not grow with N

CHILD = r"""
import json, os, re, sys
def mem():
    text = open("/proc/self/status").read()
    return {k: int(re.search(k + r":\s+(\d+)", text)[1]) * 1024 for k in ("VmHWM", "VmRSS")}
from kubernetes import client as k8s
from kpdoctor.agent.cluster import ClusterCache
from kpdoctor.agent.loop import Agent, AgentOptions
base = mem()
cache = ClusterCache(k8s.ApiClient(k8s.Configuration(host=sys.argv[1])), sys.argv[2])
cache.start()
synced = cache.wait_synced(120)
print(json.dumps({"synced": synced, "errors": cache.errors(), "base": base, "listed": mem(),
                  "objects": {p: len(s.objects) for p, s in cache.state.items()}}), flush=True)
os._exit(0)  # the watch threads are still reading: no interpreter teardown under them
"""


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def bulk() -> Iterator[tuple[BulkServer, int]]:
    n = 6_000
    with BulkServer(bulk_objects(n)) as server:
        yield server, n


def _pages(server: BulkServer, path: str) -> list[dict[str, str]]:
    return [r["query"] for r in server.requests if r["path"] == path and r["query"].get("watch") != "true"]


@pytest.mark.slow
@pytest.mark.parametrize("services", [5_000, 20_000])
def test_the_agent_lists_in_pages_and_keeps_little_per_service(services: int) -> None:
    with BulkServer(bulk_objects(services)) as server:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        res = subprocess.run([sys.executable, "-c", CHILD, server.url, BULK_NODE], capture_output=True, text=True,
                             timeout=300, env=env)  # fmt: skip
        assert res.returncode == 0, res.stderr[-2000:]
        out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
        assert out["synced"] and not out["errors"], out
        assert out["objects"]["cluster/services.json"] == services
        assert out["objects"]["cluster/endpointslices.json"] == services
        for path in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"):
            pages = _pages(server, path)
            assert len(pages) == math.ceil(services / 500), path
            assert all(q.get("limit") == "500" for q in pages)
            assert "continue" not in pages[0] and all(q.get("continue") for q in pages[1:])
    grew = out["listed"]["VmHWM"] - out["base"]["VmRSS"]
    budget = services * PER_SERVICE + SLACK
    assert grew <= budget, (f"{services} Services listed: {grew / 1024**2:.0f} MB of resident memory, more than "
                            f"{budget / 1024**2:.0f} MB ({grew * 100_000 / services / 1024**2:.0f} MB per 100,000)")


def test_collect_cluster_lists_in_pages_and_trims(bulk: tuple[BulkServer, int], tmp_path: Path) -> None:
    server, n = bulk
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    before = len(server.requests)
    got = collect_cluster(node_hint=BULK_NODE, node_addresses=[], kubeconfig=str(kubeconfig), context=None,
                          budget=Budget(120), progress=lambda _: None)
    server.requests[:before] = []
    assert got.error is None and got.node == BULK_NODE
    for path in ("/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"):
        pages = _pages(server, path)
        assert len(pages) == math.ceil(n / 500) and all(q.get("limit") == "500" for q in pages), path
    arts = {a.path: a for a in got.artifacts}
    services = json.loads(arts["cluster/services.json"].data)["items"]
    slices = json.loads(arts["cluster/endpointslices.json"].data)["items"]
    assert len(services) == len(slices) == n
    text = arts["cluster/services.json"].data + arts["cluster/endpointslices.json"].data
    assert b"managedFields" not in text and b"last-applied-configuration" not in text and b"targetRef" not in text
    assert services[7]["spec"]["clusterIP"] and services[7]["metadata"]["resourceVersion"]
    assert slices[7]["endpoints"][0]["addresses"] and slices[7]["metadata"]["labels"]["kubernetes.io/service-name"]

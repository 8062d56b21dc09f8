"""Secret scrubbing and IP pseudonyms: planted secrets go, everything diagnosed from stays."""

from __future__ import annotations

import ipaddress
import json
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kpdoctor.collect.redact import REDACTED, IpPseudonyms, redact_secrets
from kpdoctor.demo import DEMOS, demo_path
from kpdoctor.diagnose import diagnose_paths
from kpdoctor.model import Finding, Report

DATA = Path(__file__).resolve().parent / "data"
DEMO_ROOT = demo_path(DEMOS[0].name).parent
KEY = b"\x01" * 32
JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEyMyJ9.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50In0.c2lnbmF0dXJlX2J5dGVz"


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


# --------------------------------------------------------------------------------------------
# Secrets: real artifacts pass through byte for byte
# --------------------------------------------------------------------------------------------


def test_every_demo_and_test_data_file_is_unchanged() -> None:
    checked, changed = 0, []
    for bundle in sorted(DEMO_ROOT.iterdir()):
        for f in _files(bundle):
            rel = f.relative_to(bundle).as_posix()
            data = f.read_bytes()
            checked += 1
            if redact_secrets(rel, data) != data:
                changed.append(f"{bundle.name}/{rel}")
    for f in _files(DATA):
        if "secret" in f.name:
            continue  # planted on purpose
        data = f.read_bytes()
        rel = f.relative_to(DATA).as_posix()
        paths = [rel] + ([f"cluster/{f.name}"] if f.suffix == ".json" else [])
        for path in paths:
            checked += 1
            if redact_secrets(path, data) != data:
                changed.append(f"tests/data/{rel} as {path}")
    assert checked > 100
    assert not changed


def _cite_sig(f: Finding) -> tuple[Any, ...]:
    return (
        f.code,
        f.severity,
        f.confidence,
        f.cause,
        tuple((c.artifact, c.line) for c in f.evidence),
        tuple(f.explains),
        tuple(_cite_sig(x) for x in f.folded),
    )


def signature(report: Report) -> tuple[Any, ...]:
    """What a diagnosis concluded, without the addresses it names."""
    ver = report.verification
    results = (
        None
        if ver is None
        else (
            [(r.service, r.port, r.protocol, r.family, r.traffic, r.status, r.kind) for r in ver.results],
            len(ver.stale),
            ver.services_checked,
        )
    )
    return (
        [_cite_sig(f) for f in report.findings],
        sorted(s.code for s in report.skipped),
        report.checks_run,
        len(report.problems),
        report.artifacts,
        results,
    )


def _rewritten(tmp: Path, name: str, fn: Callable[[str, bytes], bytes]) -> Path:
    src = demo_path(name)
    dst = tmp / name
    shutil.copytree(src, dst)
    for f in _files(dst):
        f.write_bytes(fn(f.relative_to(dst).as_posix(), f.read_bytes()))
    return dst


@pytest.mark.parametrize("name", [d.name for d in DEMOS])
def test_diagnosis_is_the_same_after_secret_redaction(tmp_path: Path, name: str) -> None:
    before, _ = diagnose_paths([demo_path(name)])
    after, _ = diagnose_paths([_rewritten(tmp_path, name, redact_secrets)])
    assert before.findings
    assert signature(after) == signature(before)


# --------------------------------------------------------------------------------------------
# Secrets: planted ones go, the rest stays
# --------------------------------------------------------------------------------------------


def _assert_only_lines(before: str, after: str, changed: set[int]) -> None:
    b, a = before.split("\n"), after.split("\n")
    assert len(a) == len(b)
    diff = {i for i, (x, y) in enumerate(zip(b, a, strict=True)) if x != y}
    assert diff == changed, [(i, b[i], a[i]) for i in sorted(diff ^ changed)]


KUBECONFIG = """\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0FDRVJUSUZJQ0FURQ==
    server: https://10.0.0.1:6443
  name: prod
users:
- name: kube-proxy
  user:
    token: PLANTEDTOKEN0123456789
    client-certificate-data: Q0xJRU5UQ0VSVA==
    client-key-data: UExBTlRFREtFWURBVEE=
    password: "PLANTEDPASSWORD"
    username: admin
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
- name: oidc
  user:
    auth-provider:
      config:
        id-token: PLANTEDIDTOKEN
        refresh-token: PLANTEDREFRESH
        client-secret: PLANTEDCLIENTSECRET
        client-id: kubernetes
    secret: ""
"""


def test_kubeconfig_credentials_are_redacted() -> None:
    out = redact_secrets("kube-proxy/kubeconfig", KUBECONFIG.encode()).decode()
    assert "PLANTED" not in out
    _assert_only_lines(KUBECONFIG, out, {9, 11, 12, 19, 20, 21})
    assert "    token: <redacted>\n" in out
    assert '    password: "<redacted>"\n' in out
    assert "client-certificate-data: Q0xJRU5UQ0VSVA==" in out  # certificates are public
    assert "tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token" in out
    assert 'secret: ""' in out


def test_yaml_block_scalar_token_keeps_its_lines() -> None:
    text = "config:\n  token: |\n    PLANTEDLINE1\n    PLANTEDLINE2\n\n    PLANTEDLINE3\n  mode: iptables\nnext: 1\n"
    out = redact_secrets("kube-proxy/config.yaml", text.encode()).decode()
    assert "PLANTED" not in out
    assert out.endswith("  mode: iptables\nnext: 1\n")
    _assert_only_lines(text, out, {2, 3, 5})


def _pod(env: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "api", "namespace": "shop", "annotations": annotations or {}},
        "spec": {
            "nodeName": "worker-1",
            "containers": [
                {"name": "api", "image": "api:1", "env": env, "args": ["--token", "PLANTEDARG", "--v", "2"]}
            ],
            "initContainers": [
                {"name": "init", "image": "init:1", "env": [{"name": "API_KEY", "value": "PLANTEDKEY"}]}
            ],
        },
        "status": {"podIP": "10.244.1.7", "phase": "Running"},
    }


def test_pod_env_credentials_and_last_applied_are_removed() -> None:
    env: list[dict[str, Any]] = [
        {"name": "DB_PASSWORD", "value": "hunter2PLANTED"},
        {"name": "GITHUB_TOKEN", "value": "ghp_PLANTED"},
        {"name": "innocent", "value": JWT},
        {"name": "AWS_KEY_ID_ALIAS", "value": "AKIAPLANTED000000000"},
        {"name": "LOG_LEVEL", "value": "debug"},
        {"name": "ENABLE_AUTH", "value": "true"},
        {"name": "TOKEN_FILE", "value": "/var/run/token"},
        {"name": "DB_PASSWORD_REF", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
    ]
    last = json.dumps({"spec": {"containers": [{"env": [{"name": "DB_PASSWORD", "value": "hunter2PLANTED"}]}]}})
    pods = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [_pod(env, {"kubectl.kubernetes.io/last-applied-configuration": last, "team": "shop"})],
    }
    out = redact_secrets("cluster/pods.json", json.dumps(pods, indent=2).encode())
    text = out.decode()
    assert "PLANTED" not in text and "hunter2" not in text and JWT not in text
    doc = json.loads(out)
    assert text == json.dumps(doc, indent=2) + "\n"
    pod = doc["items"][0]
    assert pod["metadata"]["annotations"] == {"team": "shop"}
    values = {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}
    assert values == {
        "DB_PASSWORD": REDACTED,
        "GITHUB_TOKEN": REDACTED,
        "innocent": REDACTED,
        "AWS_KEY_ID_ALIAS": REDACTED,
        "LOG_LEVEL": "debug",
        "ENABLE_AUTH": "true",
        "TOKEN_FILE": "/var/run/token",
        "DB_PASSWORD_REF": {"secretKeyRef": {"name": "db", "key": "password"}},
    }
    assert pod["spec"]["containers"][0]["args"] == ["--token", REDACTED, "--v", "2"]
    assert pod["spec"]["initContainers"][0]["env"] == [{"name": "API_KEY", "value": REDACTED}]
    assert pod["status"] == {"podIP": "10.244.1.7", "phase": "Running"} and pod["spec"]["nodeName"] == "worker-1"


@pytest.mark.parametrize(
    ("kind", "where"),
    [
        ("Deployment", ("spec", "template", "spec")),
        ("DaemonSet", ("spec", "template", "spec")),
        ("StatefulSet", ("spec", "template", "spec")),
        ("ReplicaSet", ("spec", "template", "spec")),
        ("Job", ("spec", "template", "spec")),
        ("CronJob", ("spec", "jobTemplate", "spec", "template", "spec")),
    ],
)
def test_workload_templates_are_scrubbed(kind: str, where: tuple[str, ...]) -> None:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "env": [{"name": "SIGNING_KEY", "value": "PLANTED"}, {"name": "PORT", "value": "80"}]}
        ]
    }
    obj: dict[str, Any] = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "w"}}
    node = obj
    for k in where[:-1]:
        node = node.setdefault(k, {})
    node[where[-1]] = spec
    out = json.loads(redact_secrets("cluster/workloads.json", json.dumps({"kind": "List", "items": [obj]}).encode()))
    node = out["items"][0]
    for k in where:
        node = node[k]
    assert node["containers"][0]["env"] == [{"name": "SIGNING_KEY", "value": REDACTED}, {"name": "PORT", "value": "80"}]


def test_secrets_are_dropped_from_lists_and_typed_lists() -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {"clusterIP": "10.96.0.10"}}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db"},
        "type": "Opaque",
        "data": {"password": "UExBTlRFRA=="},
    }
    sa = {
        "metadata": {"name": "default-token-x"},
        "type": "kubernetes.io/service-account-token",
        "data": {"token": "UExBTlRFRA=="},
    }
    out = json.loads(
        redact_secrets("cluster/configmaps.json", json.dumps({"kind": "List", "items": [svc, secret, svc]}).encode())
    )
    assert out["items"] == [svc, svc]
    out = json.loads(redact_secrets("cluster/x.json", json.dumps({"kind": "SecretList", "items": [sa, sa]}).encode()))
    assert out["items"] == []
    out = json.loads(redact_secrets("cluster/x.json", json.dumps({"kind": "List", "items": [sa]}).encode()))
    assert out["items"] == []
    out = json.loads(redact_secrets("cluster/x.json", json.dumps(secret).encode()))
    assert out == {"apiVersion": "v1", "items": [], "kind": "List"}


def test_configmap_data_goes_through_the_text_rules() -> None:
    cm = {
        "kind": "ConfigMap",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "data": {"kubeconfig.conf": KUBECONFIG, "config.conf": "mode: iptables\nclusterCIDR: 10.244.0.0/16\n"},
    }
    out = json.loads(redact_secrets("cluster/configmaps.json", json.dumps({"kind": "List", "items": [cm]}).encode()))
    data = out["items"][0]["data"]
    assert "PLANTED" not in data["kubeconfig.conf"]
    _assert_only_lines(KUBECONFIG, data["kubeconfig.conf"], {9, 11, 12, 19, 20, 21})
    assert data["config.conf"] == cm["data"]["config.conf"]  # type: ignore[index]


def test_bad_cluster_json_falls_back_to_the_text_rules() -> None:
    text = '{"items": [ {"token": "PLANTED", "name": "x"\nkube-proxy --token=PLANTED2\n'
    out = redact_secrets("cluster/pods.json", text.encode()).decode()
    assert out == '{"items": [ {"token": "<redacted>", "name": "x"\nkube-proxy --token=<redacted>\n'


def test_command_lines_and_ps_output() -> None:
    ps = (
        "UID PID PPID C STIME TTY TIME CMD\n"
        "root 31004 30990 1 Jun17 ? 00:20:07 kube-proxy --hostname-override=10.0.4.21 --token=abcPLANTED "
        "--kubeconfig=/var/lib/kube-proxy/config --v=2\n"
        "root 31005 1 0 Jun17 ? 00:00:00 agent --api-key PLANTED2 --token-file=/var/run/token "
        "--service-account-private-key-file /etc/k.key --enable-bootstrap-token-auth=true -password='PLANTED 3'\n"
        "root 31006 1 0 Jun17 ? 00:00:00 env DB_PASSWORD=PLANTED4 AWS_SECRET_ACCESS_KEY=PLANTED5 PATH=/bin ./run\n"
        "root 31007 1 0 Jun17 ? 00:00:00 /usr/bin/kubelet --authorization-mode=Webhook --anonymous-auth=false\n"
    )
    out = redact_secrets("node/processes.txt", ps.encode()).decode()
    assert "PLANTED" not in out
    _assert_only_lines(ps, out, {1, 2, 3})
    lines = out.split("\n")
    assert lines[1].endswith("--token=<redacted> --kubeconfig=/var/lib/kube-proxy/config --v=2")
    assert "--api-key <redacted> --token-file=/var/run/token --service-account-private-key-file /etc/k.key" in lines[2]
    assert "--enable-bootstrap-token-auth=true -password='<redacted>'" in lines[2]
    assert "env DB_PASSWORD=<redacted> AWS_SECRET_ACCESS_KEY=<redacted> PATH=/bin ./run" in lines[3]
    assert lines[4] == ps.split("\n")[4]
    assert redact_secrets("kube-proxy/cmdline.txt", b"kube-proxy --token abc\n") == b"kube-proxy --token <redacted>\n"


def test_log_lines() -> None:
    log = (
        'I0525 07:13:03.848829       1 flags.go:33] FLAG: --kubeconfig=""\n'
        'I0525 07:13:03.848830       1 flags.go:33] FLAG: --token=""\n'
        "I0525 07:13:04.000000       1 round_trippers.go:420]     Authorization: Bearer PLANTEDBEARER\n"
        "I0525 07:13:04.000001       1 round_trippers.go:420]     Authorization: Bearer <masked>\n"
        f'I0525 07:13:05.000000       1 client.go:1] "Got token" token="{JWT}" user="system:kube-proxy"\n'
        f"I0525 07:13:05.000001       1 client.go:1] header {JWT} and curl -H 'Authorization: Basic dXNlcjpQTEFOVEVE'\n"
        "I0525 07:13:06.000000       1 proxier.go:1] connecting to https://admin:PLANTEDPW@10.0.0.1:6443/api\n"
        'E0525 07:13:07.000000       1 proxier.go:1] "Failed to execute iptables-restore" err="exit status 1"\n'
    )
    out = redact_secrets("kube-proxy/log.txt", log.encode()).decode()
    assert "PLANTED" not in out and JWT not in out and "dXNlcjpQTEFOVEVE" not in out
    _assert_only_lines(log, out, {2, 4, 5, 6})
    lines = out.split("\n")
    assert lines[2].endswith("Authorization: Bearer <redacted>")
    assert 'token="<redacted>" user="system:kube-proxy"' in lines[4]
    assert "header <redacted-jwt> and curl -H 'Authorization: Basic <redacted>'" in lines[5]
    assert "https://admin:<redacted>@10.0.0.1:6443/api" in lines[6]


def test_pem_private_keys_keep_their_line_count() -> None:
    text = (
        "ca.crt: |\n"
        "  -----BEGIN CERTIFICATE-----\n"
        "  MIICpublicpublic\n"
        "  -----END CERTIFICATE-----\n"
        "tls.key: |\n"
        "  -----BEGIN RSA PRIVATE KEY-----\n"
        "  MIIEPLANTED1\n"
        "  PLANTED2==\n"
        "  -----END RSA PRIVATE KEY-----\n"
        'inline: "-----BEGIN PRIVATE KEY-----\\nPLANTED3\\n-----END PRIVATE KEY-----\\n"\n'
        "after: 1\n"
    )
    out = redact_secrets("node/something.txt", text.encode()).decode()
    assert "PLANTED" not in out
    _assert_only_lines(text, out, {6, 7, 9})
    assert "  -----BEGIN RSA PRIVATE KEY-----\n  <redacted>\n  <redacted>\n  -----END RSA PRIVATE KEY-----\n" in out
    assert "MIICpublicpublic" in out


def test_redaction_is_idempotent_and_never_raises() -> None:
    once = redact_secrets("node/processes.txt", KUBECONFIG.encode())
    assert redact_secrets("node/processes.txt", once) == once
    rng = random.Random(7)
    for i in range(300):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        noise = rng.choice(
            [b"", b"token: ", b"--password=", b"-----BEGIN RSA PRIVATE KEY-----\n", b'{"kind": "Secret"', b"\xff"]
        )
        for path in ("cluster/pods.json", "kube-proxy/log.txt"):
            assert isinstance(redact_secrets(path, noise + blob), bytes), i
    assert redact_secrets("cluster/pods.json", b"[" * 100000) == b"[" * 100000


# --------------------------------------------------------------------------------------------
# IP pseudonyms
# --------------------------------------------------------------------------------------------


V4_SPECIAL = [
    ipaddress.ip_network(n) for n in ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4")
]
V4_KEPT = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")]
V6_SPECIAL = [ipaddress.ip_network(n) for n in ("::/128", "::1/128", "fe80::/10", "ff00::/8")]
V6_KEPT = [ipaddress.ip_network(n) for n in ("fc00::/7", "2000::/3", "::ffff:0:0/96")]


def _cpl(a: int, b: int, bits: int) -> int:
    return bits - (a ^ b).bit_length()


def test_mapping_is_a_consistent_bijection() -> None:
    rng = random.Random(1)
    p = IpPseudonyms(KEY)
    addrs = {rng.getrandbits(32) for _ in range(30000)}
    out = {a: p.map4(a) for a in addrs}
    assert len(set(out.values())) == len(addrs)
    again, other = IpPseudonyms(KEY), IpPseudonyms(b"\x02" * 32)
    sample = [a for a in list(addrs)[:3000] if not any(ipaddress.IPv4Address(a) in n for n in V4_SPECIAL)]
    assert all(again.map4(a) == out[a] for a in sample)
    assert sum(other.map4(a) != out[a] for a in sample) > 0.99 * len(sample)
    # a whole /16 maps onto a whole /16: a permutation, not just an injection
    net = int(ipaddress.ip_address("10.1.0.0"))
    images = {p.map4(net + i) for i in range(65536)}
    top = next(iter(images)) >> 16
    assert len(images) == 65536 and {x >> 16 for x in images} == {top}
    v6 = {rng.getrandbits(128) for _ in range(5000)}
    assert len({p.map6(a) for a in v6}) == len(v6)
    assert p.address("10.1.2.3") == again.address("10.1.2.3") == p.text("10.1.2.3")
    assert IpPseudonyms().address("8.8.8.8") != IpPseudonyms().address("8.8.8.8")  # a random key each


def _pairs(
    rng: random.Random, bits: int, specials: list[ipaddress.IPv4Network | ipaddress.IPv6Network], n: int
) -> list[tuple[int, int, int]]:
    out = []
    for _ in range(n):
        if rng.random() < 0.3:
            net = rng.choice(specials)
            a = (
                int(net.network_address) | rng.getrandbits(bits - net.prefixlen)
                if net.prefixlen < bits
                else int(net.network_address)
            )
        else:
            a = rng.getrandbits(bits)
        k = rng.randrange(bits)
        b = (
            (a ^ (1 << (bits - 1 - k))) & ~((1 << (bits - 1 - k)) - 1) | rng.getrandbits(bits - 1 - k)
            if k < bits - 1
            else a ^ 1
        )
        out.append((a, b, k))
    return out


def test_prefixes_are_preserved_exactly() -> None:
    rng = random.Random(2)
    p = IpPseudonyms(KEY)
    for a, b, k in _pairs(rng, 32, V4_SPECIAL + V4_KEPT, 20000):
        assert _cpl(a, b, 32) == k
        assert _cpl(p.map4(a), p.map4(b), 32) == k, (ipaddress.IPv4Address(a), ipaddress.IPv4Address(b))
    for a, b, k in _pairs(rng, 128, V6_SPECIAL + V6_KEPT, 5000):
        assert _cpl(p.map6(a), p.map6(b), 128) == k, (ipaddress.IPv6Address(a), ipaddress.IPv6Address(b))


def test_special_blocks() -> None:
    p = IpPseudonyms(KEY)
    for a in (
        "0.0.0.0",
        "127.0.0.1",
        "169.254.169.254",
        "224.0.0.251",
        "255.255.255.255",
        "255.255.255.0",
        "255.0.0.0",
        "240.1.2.3",
    ):
        assert p.address(a) == a
    for a in ("::", "::1", "fe80::1", "fe80::a8bb:ccff:fedd:eeff", "ff02::1"):
        assert p.address(a) == a
    rng = random.Random(3)
    for net in V4_KEPT + V6_KEPT[:2]:
        for _ in range(300):
            inside = net.network_address + rng.getrandbits(net.max_prefixlen - net.prefixlen)
            assert ipaddress.ip_address(p.address(str(inside))) in net
    moved = 0
    for _ in range(20000):
        a4 = ipaddress.IPv4Address(rng.getrandbits(32))
        if any(a4 in n for n in V4_SPECIAL + V4_KEPT):
            continue
        b4 = ipaddress.IPv4Address(p.address(str(a4)))
        assert not any(b4 in n for n in V4_SPECIAL + V4_KEPT), (a4, b4)
        moved += a4 != b4
    assert moved > 10000
    for _ in range(3000):
        a6 = ipaddress.IPv6Address(rng.getrandbits(128))
        if any(a6 in n for n in V6_SPECIAL + V6_KEPT):
            continue
        b6 = ipaddress.IPv6Address(p.address(str(a6)))
        assert not any(b6 in n for n in V6_SPECIAL + V6_KEPT), (a6, b6)
    # IPv4-mapped IPv6 follows the IPv4 pseudonym
    assert p.text("::ffff:10.0.0.1") == "::ffff:" + p.address("10.0.0.1")


def test_text_forms() -> None:
    p = IpPseudonyms(KEY)
    a = p.address("10.244.1.7")
    net = ".".join(a.split(".")[:3]) + ".0"
    assert p.text("-A KUBE-SVC-X ! -s 10.0.0.0/8 -d 10.244.1.7/32") == f"-A KUBE-SVC-X ! -s 10.0.0.0/8 -d {a}/32"
    assert p.text("podCIDR: 10.244.1.0/24") == f"podCIDR: {net}/24"
    assert p.text("-s 10.244.1.0/255.255.255.0 -j X") == f"-s {net}/255.255.255.0 -j X"
    assert p.text("0.0.0.0/0 and 0.0.0.0") == "0.0.0.0/0 and 0.0.0.0"
    assert p.text("inet 10.244.1.7/24 brd") == f"inet {a}/24 brd"  # an interface address keeps its host part
    assert p.text("-> 10.244.1.7:8080  Masq") == f"-> {a}:8080  Masq"
    host = "ip-" + a.replace(".", "-")
    assert p.text("ip-10-244-1-7.ec2.internal ip-10-244-1-7") == f"{host}.ec2.internal {host}"
    v6 = p.address("fd00:10:244:1::7")
    assert p.text("[fd00:10:244:1::7]:8080 fd00:10:244:1::7/128") == f"[{v6}]:8080 {v6}/128"
    v6net = p.text("fd00:10:244:1::/64")
    assert v6net.endswith("::/64") and ipaddress.ip_address(v6) in ipaddress.ip_network(v6net)
    assert p.text("2001:DB8:0:0:0:0:0:1") == p.address("2001:db8::1")
    for keep in (
        "Kubernetes v1.18.4",
        "iptables v1.8.7 (legacy)",
        "Linux 5.4.0-1045-aws #49-Ubuntu 4.14.173-137.229.amzn2.x86_64",
        "v1.2.3.4",
        "I0525 10:32:11.123456 and 2020-05-25T07:13:21Z",
        "link/ether 02:42:ac:11:00:02 brd ff:ff:ff:ff:ff:ff",
        "1.2.3.256 and 300.1.1.1 and 1.2.3.4.5",
        "ipv4 2 tcp 6 431999 ESTABLISHED id=3458765 mark=0x4000 use=1 [ASSURED] zone=0",
        "std::vector dead:beef:cafe a::b::c --dport 30080 [0:0] :KUBE-SERVICES - [0:0]",
        "10.01.2.3",
    ):
        assert p.text(keep) == keep, keep
    with pytest.raises(ValueError):
        p.address("v1.2.3")
    with pytest.raises(ValueError):
        p.address("10.0.0.0/33")
    assert p.data(b"\xff\xfe 10.244.1.7\n") == b"\xff\xfe " + a.encode() + b"\n"


def test_line_counts_and_non_address_text_survive() -> None:
    p = IpPseudonyms(KEY)
    for f in _files(DEMO_ROOT) + _files(DATA):
        text = f.read_bytes().decode("utf-8", "surrogateescape")
        out = p.text(text)
        assert out.count("\n") == text.count("\n"), f
        assert p.text(text) == out  # consistent across calls


def _ip_rewrite(p: IpPseudonyms) -> Callable[[str, bytes], bytes]:
    return lambda _path, data: p.data(data)


@pytest.mark.parametrize("name", [d.name for d in DEMOS])
def test_diagnosis_is_the_same_after_ip_redaction(tmp_path: Path, name: str) -> None:
    p = IpPseudonyms(KEY)
    before, _ = diagnose_paths([demo_path(name)])
    bundle = _rewritten(tmp_path, name, _ip_rewrite(p))
    after, _ = diagnose_paths([bundle])
    assert signature(after) == signature(before)
    assert after.node == (p.text(before.node) if before.node else None)


def test_config_demo_verifies_the_same_per_service_port(tmp_path: Path) -> None:
    name = "config-ignores-hostname"
    p = IpPseudonyms(KEY)
    before, _ = diagnose_paths([demo_path(name)])
    bundle = _rewritten(tmp_path, name, lambda path, data: p.data(redact_secrets(path, data)))
    after, _ = diagnose_paths([bundle])
    assert before.verification is not None and after.verification is not None
    rows = [(r.label, r.traffic, r.status) for r in before.verification.results]
    assert rows and [(r.label, r.traffic, r.status) for r in after.verification.results] == rows
    assert [p.text(r.destination) for r in before.verification.results] == [
        r.destination for r in after.verification.results
    ]
    for rel in ("node/iptables-legacy-save.txt", "cluster/endpoints.json", "cluster/pods.json"):
        original, redacted = (demo_path(name) / rel).read_text(), (bundle / rel).read_text()
        addrs = {a for a in re.findall(r"\b10\.188\.\d+\.\d+\b", original) if not a.endswith(".0")}
        assert addrs and not [a for a in addrs if re.search(rf"\b{re.escape(a)}\b", redacted)], rel
    for rel in ("manifest.json", "kube-proxy/cmdline.txt", "node/hostname", "cluster/nodes.json"):
        assert "ip-10-188-166-140" not in (bundle / rel).read_text(), rel


def test_one_pass_search_finds_the_lines_the_word_by_word_search_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The trigger words are found in one Aho-Corasick pass; the search word by word (the fallback
    without ahocorasick_rs) must flag the same lines, so both redact alike."""
    from kpdoctor.collect import redact

    texts = [
        b"--kubeconfig=/x --token=abc123 --password hunter2\nplain line\nAuthorization: Bearer eyJhbGciOi.x.y\n",
        b"export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI\nAKIAIOSFODNN7EXAMPLE\nhttps://user:pw@example.com/\n",
        b"no newline at the end: token: abc",
        b'I0102 15:04:05.0 1 a.go:1] kubeconfig: client-key-data: abc x-api-key: k1 body="{\\"password\\":\\"pw\\"}"\n'
        b"root 1 0 0 Jun17 ? 00:00:00 mysql -uroot -phunter3 -h db\nCookie: a=1; b=2\n",
        *(f.read_bytes() for f in sorted(DATA.rglob("*.txt"))[:40]),
    ]
    fast = [redact._scrub_bytes(t) for t in texts]
    monkeypatch.setattr(redact, "_TRIGGER_AC", None)
    assert [redact._scrub_bytes(t) for t in texts] == fast
    assert b"hunter2" not in fast[0] and b"abc123" not in fast[0]
    assert not any(w in fast[3] for w in (b"abc", b"k1", b"pw", b"hunter3", b"a=1"))


def test_a_key_whose_value_is_an_object_or_a_list_keeps_its_structure() -> None:
    """A JSON schema or a manifest names `password:`/`secret:` fields whose value is a mapping:
    the opening brace is structure, not a secret (redacting it broke the document)."""
    schema = b'{\n  "properties": {\n    "password": {\n      "type": "object"\n    },\n    "tokens": [\n    ]\n  }\n}\n'
    assert redact_secrets("deploy/schema.json", schema) == schema
    yaml = b"spec:\n  password: {name: x}\n  token: s3cr3t-value\n"
    assert redact_secrets("x.yaml", yaml) == b"spec:\n  password: {name: x}\n  token: <redacted>\n"


# --------------------------------------------------------------------------------------------
# Secrets inside lines (issue 36): a key anywhere, headers, program options, base64 of PEM
# --------------------------------------------------------------------------------------------

KLOG = "I0102 15:04:05.000000    1 file.go:12] "


def test_a_secret_key_anywhere_in_a_line() -> None:
    log = (
        f"{KLOG}loaded kubeconfig: client-key-data: PLANTED1 token: PLANTED2\n"
        f'{KLOG}"Request" body="{{\\"user\\":\\"a\\",\\"password\\":\\"PLANTED3\\"}}" code=401\n'
        f"{KLOG}config &{{Host:https://10.0.0.1 Password:PLANTED4 QPS:5}}\n"
        f"{KLOG}db password = PLANTED5 and secret:PLANTED6\n"
        f"{KLOG}headers: Authorization: Bearer PLANTED7\n"
        f'{KLOG}headers {{"X-Api-Key":["PLANTED8"],"Accept":["*/*"]}} map[Cookie:[sid=PLANTED9]]\n'
        f"{KLOG}    X-Auth-Token: PLANTED10\n"
        f"{KLOG}    Set-Cookie: sid=PLANTED11; Path=/; HttpOnly\n"
        "aws_secret_access_key = PLANTED12\n"
        "spring.datasource.password=PLANTED13\n"
    )
    out = redact_secrets("kube-proxy/log.txt", log.encode()).decode()
    assert "PLANTED" not in out
    _assert_only_lines(log, out, set(range(10)))
    lines = out.split("\n")
    assert lines[0] == f"{KLOG}loaded kubeconfig: client-key-data: <redacted> token: <redacted>"
    assert lines[1] == f'{KLOG}"Request" body="{{\\"user\\":\\"a\\",\\"password\\":\\"<redacted>\\"}}" code=401'
    assert lines[2] == f"{KLOG}config &{{Host:https://10.0.0.1 Password:<redacted> QPS:5}}"
    assert lines[3] == f"{KLOG}db password = <redacted> and secret:<redacted>"
    assert lines[4] == f"{KLOG}headers: Authorization: Bearer <redacted>"
    assert lines[5] == f'{KLOG}headers {{"X-Api-Key":["<redacted>"],"Accept":["*/*"]}} map[Cookie:[<redacted>]]'
    assert lines[6] == f"{KLOG}    X-Auth-Token: <redacted>"
    assert lines[7] == f"{KLOG}    Set-Cookie: <redacted>"
    assert lines[8:10] == ["aws_secret_access_key = <redacted>", "spring.datasource.password=<redacted>"]


def test_what_only_looks_like_a_secret_key_stays() -> None:
    """kube-proxy logs, rule dumps and listings use the trigger words without holding secrets."""
    keep = [
        f'{KLOG}"Failed to read token" err="open /var/run/secrets/kubernetes.io/serviceaccount/token: no such file"',
        f'{KLOG}FLAG: --token=""',
        f"{KLOG}token: /var/run/secrets/kubernetes.io/serviceaccount/token",
        f'{KLOG}failed to list *v1.Secret: secrets is forbidden: User "system:serviceaccount:kube-system:kp"',
        f'{KLOG}"Sync key" key="default/web" password: true secret: null',
        f"{KLOG}    Authorization: Bearer <masked>",
        '-A KUBE-SERVICES -m comment --comment "default/mysql" -m tcp -p tcp -d 10.96.0.5/32 --dport 3306 -j X',
        "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
        "net.ipv4.tcp_fastopen_key = 00000000-00000000-00000000-00000000",
        "net.ipv4.tcp_syncookies = 1",
        "    client-key: /etc/kubernetes/pki/admin.key",
        "    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUN5RENDQWJDZ0F3SUJBZ0lCQURBTg==",
        "spec:\n  secretKeyRef:\n    key: password",
        '    "status": {"token": SECRET_VALUE + ".jwt"}',  # code, not JSON
        "root 1 0 0 Jun17 ? 00:00:00 /usr/sbin/mysqld --datadir=/var/lib/mysql --plugin-dir=/usr/lib/mysql/plugin",
        "root 2 0 0 Jun17 ? 00:00:00 ssh -p 2222 host",
    ]
    for line in keep:
        assert redact_secrets("kube-proxy/log.txt", line.encode()) == line.encode(), line


def test_passwords_in_the_options_of_known_programs() -> None:
    ps = (
        "UID PID PPID C STIME TTY TIME CMD\n"
        "root 1 0 0 Jun17 ? 00:00:00 /usr/bin/mysql -uroot -pPLANTED1 -h db -P 3306 shop\n"
        "root 2 0 0 Jun17 ? 00:00:00 mysql -uroot -p shop\n"
        "root 3 0 0 Jun17 ? 00:00:00 sh -c mysqldump -uroot -p'PLANTED 2' shop | gzip\n"
        "root 4 0 0 Jun17 ? 00:00:00 sshpass -p PLANTED3 ssh -p 22 a@b\n"
        "root 5 0 0 Jun17 ? 00:00:00 redis-cli -h r -a -PLANTED4 ping\n"
        "root 6 0 0 Jun17 ? 00:00:00 curl -sS -u admin:PLANTED5 https://10.0.0.1/\n"
        "root 7 0 0 Jun17 ? 00:00:00 openssl pkcs12 -in a.p12 -passin pass:PLANTED6 -nodes\n"
        "root 8 0 0 Jun17 ? 00:00:00 agent --token -PLANTED7abc --v=2\n"
    )
    out = redact_secrets("node/processes.txt", ps.encode()).decode()
    assert "PLANTED" not in out
    _assert_only_lines(ps, out, {1, 3, 4, 5, 6, 7, 8})
    lines = out.split("\n")
    assert lines[1].endswith("mysql -uroot -p<redacted> -h db -P 3306 shop")
    assert lines[3].endswith("mysqldump -uroot -p'<redacted>' shop | gzip")
    assert lines[4].endswith("sshpass -p <redacted> ssh -p 22 a@b")
    assert lines[5].endswith("redis-cli -h r -a <redacted> ping")
    assert lines[6].endswith("curl -sS -u admin:<redacted> https://10.0.0.1/")
    assert lines[7].endswith("-passin pass:<redacted> -nodes")
    assert lines[8].endswith("agent --token <redacted> --v=2")
    pod = _pod([])
    c = pod["spec"]["containers"][0]
    c["command"] = ["mysql", "-uroot", "-pPLANTED8", "shop"]
    c["livenessProbe"] = {"exec": {"command": ["redis-cli", "-a", "PLANTED9", "ping"]}}
    doc = json.loads(redact_secrets("cluster/pods.json", json.dumps({"kind": "List", "items": [pod]}).encode()))
    c = doc["items"][0]["spec"]["containers"][0]
    assert c["command"] == ["mysql", "-uroot", "-p<redacted>", "shop"]
    assert c["livenessProbe"]["exec"]["command"] == ["redis-cli", "-a", REDACTED, "ping"]


def test_base64_of_a_private_key_goes_and_a_certificate_stays() -> None:
    import base64

    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEPLANTED\n-----END RSA PRIVATE KEY-----\n"
    cert = "-----BEGIN CERTIFICATE-----\nMIICpublic\n-----END CERTIFICATE-----\n"
    k64, c64 = base64.b64encode(key.encode()).decode(), base64.b64encode(cert.encode()).decode()
    wrapped = base64.encodebytes((key * 3).encode()).decode()  # 76 columns, as `base64` writes
    text = f'{KLOG}"Loaded" data="{k64}" ca={c64}\n  data:\n' + "".join(f"    {x}\n" for x in wrapped.split()) + "next: 1\n"
    out = redact_secrets("node/x.txt", text.encode()).decode()
    assert k64 not in out and "UExBTlRFRA" not in out and c64 in out
    _assert_only_lines(text, out, set(range(len(wrapped.split()) + 2)) - {1})
    assert out.split("\n")[2] == "    <redacted>" and out.endswith("next: 1\n")


def test_a_private_key_without_its_end_line_takes_only_its_own_lines() -> None:
    """A cut log: the key's base64 lines (or the rest of its own line) go; the log after stays."""
    text = (
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQ\nPLANTEDPLANTED==\n"
        f"{KLOG}Syncing iptables rules\n"
        f'{KLOG}key="-----BEGIN EC PRIVATE KEY-----\\nPLANTED\\n" cut\n'
        f"{KLOG}SyncProxyRules complete\n"
    )
    out = redact_secrets("kube-proxy/log.txt", text.encode()).decode()
    assert "PLANTED" not in out and "MIIE" not in out
    _assert_only_lines(text, out, {1, 2, 4})
    assert out.split("\n")[4] == f'{KLOG}key="-----BEGIN EC PRIVATE KEY-----<redacted>'

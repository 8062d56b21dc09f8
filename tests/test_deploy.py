"""The manifests in deploy/: rendered by Debian's kubectl 1.20 (its kustomize v2), validated offline
for several Kubernetes releases, and checked for what the agent needs (host root, lock file, RBAC)."""

from __future__ import annotations

import copy
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml
from conftest import DATA

from kpdoctor.cli import app as kpdoctor_app

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = ["base", "overlays/prometheus-operator", "overlays/small-cluster"]
# Kubernetes releases the core kinds are validated for: the oldest the validator ships schemas of,
# two between, and the newest it knows.
RELEASES = ["1.25", "1.29", "1.33", "1.37"]
PODMONITOR_SCHEMA = DATA / "deploy" / "prometheus-operator" / "podmonitor-v1.schema.json"
# bench/README.md, "The node agent": resident memory at 10,000 Services (MB), CPU per cycle (s)
MEASURED_RSS_MB = 359  # the agent's resident size after a cycle (bench/README.md, the cluster's values shared)
MEASURED_PEAK_MB = 504  # its peak, during a full verification
MEASURED_CYCLE_CPU = 2.4
DEBIAN_DEB_GLOB = "/var/cache/apt/archives/kubernetes-client_*.deb"

Obj = dict[str, Any]


# -- Debian's kubectl 1.20 ---------------------------------------------------------------------------


def _is_kubectl_120(path: str) -> bool:
    try:
        out = subprocess.run([path, "version", "--client"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return False
    return 'Minor:"20"' in out or "v1.20." in out


def find_kubectl_120(scratch: Path) -> tuple[str | None, str]:
    """Debian's kubectl 1.20: ``$KPDOCTOR_KUBECTL_120``; the installed ``kubernetes-client``; else its
    .deb in apt's cache, extracted (``dpkg-deb -x``). The package cannot be installed where another
    package owns /usr/bin/kubectl (Google's kubectl on this machine), so scripts/test only downloads
    it; the second value says why there is none."""
    explicit = os.environ.get("KPDOCTOR_KUBECTL_120")
    if explicit:
        return (explicit, "") if _is_kubectl_120(explicit) else (None, f"$KPDOCTOR_KUBECTL_120={explicit} is not 1.20")
    if shutil.which("dpkg"):
        listed = subprocess.run(["dpkg", "-L", "kubernetes-client"], capture_output=True, text=True)
        for line in listed.stdout.splitlines():
            if line.endswith("/bin/kubectl") and _is_kubectl_120(line):
                return line, ""
    debs = sorted(glob.glob(DEBIAN_DEB_GLOB))
    if debs and shutil.which("dpkg-deb"):
        subprocess.run(["dpkg-deb", "-x", debs[-1], str(scratch)], check=True)
        binary = scratch / "usr" / "bin" / "kubectl"
        if _is_kubectl_120(str(binary)):
            return str(binary), ""
    return None, (
        "no kubectl 1.20: Debian's kubernetes-client is neither installed nor in apt's cache "
        "(scripts/test, as root on Debian, downloads it: apt-get install --download-only kubernetes-client)"
    )


@pytest.fixture(scope="session")
def kubectl120(tmp_path_factory: pytest.TempPathFactory) -> str:
    path, why = find_kubectl_120(tmp_path_factory.mktemp("kubernetes-client"))
    if path is None:
        pytest.skip(why)
    return path


def render(kubectl: str, where: str) -> list[Obj]:
    """``kubectl kustomize deploy/WHERE`` with kubectl 1.20, as objects."""
    env = {**os.environ, "KUBECONFIG": "/nonexistent"}  # rendering must not need a cluster
    done = subprocess.run(
        [kubectl, "kustomize", str(DEPLOY / where)], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="session")
def rendered(kubectl120: str) -> dict[str, list[Obj]]:
    return {where: render(kubectl120, where) for where in KUSTOMIZATIONS}


def by_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def one_of(objs: list[Obj], kind: str) -> Obj:
    found = by_kind(objs, kind)
    assert len(found) == 1, [o["kind"] for o in objs]
    return found[0]


def agent_container(objs: list[Obj]) -> Obj:
    ds = one_of(objs, "DaemonSet")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    return container


# -- rendering -------------------------------------------------------------------------------------------


def test_kustomizations_use_only_what_kustomize_v2_reads() -> None:
    """kustomize v2 (kubectl <= 1.20) ignores keys it does not know: a `patches:` would be dropped
    without a word, so the files must not rely on one."""
    for where in KUSTOMIZATIONS:
        doc = yaml.safe_load((DEPLOY / where / "kustomization.yaml").read_text())
        later = {"patches", "components", "replacements", "labels", "sortOptions", "helmCharts"}
        assert not later & set(doc), (where, later & set(doc))


def test_kubectl_120_renders_every_kustomization(rendered: dict[str, list[Obj]]) -> None:
    base = rendered["base"]
    kinds = sorted(o["kind"] for o in base)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "Role", "RoleBinding", "ServiceAccount"]
    assert [o["kind"] for o in rendered["overlays/prometheus-operator"]].count("PodMonitor") == 1
    for objs in rendered.values():
        for o in objs:
            assert o["metadata"]["labels"]["app.kubernetes.io/name"] == "kpdoctor", o["metadata"]["name"]
            if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
                assert o["metadata"]["namespace"] == "kube-system", (o["kind"], o["metadata"]["name"])
    assert agent_container(base)["image"] == "kpdoctor:0.1.0"  # the images: transformer applied


def test_a_broken_kustomization_fails_to_render(kubectl120: str, tmp_path: Path) -> None:
    """The renderer is really asked: a kustomization naming a missing file fails."""
    bad = tmp_path / "bad"
    shutil.copytree(DEPLOY / "base", bad)
    text = (bad / "kustomization.yaml").read_text().replace("daemonset.yaml", "daemonset-missing.yaml")
    (bad / "kustomization.yaml").write_text(text)
    done = subprocess.run([kubectl120, "kustomize", str(bad)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "daemonset-missing.yaml" in done.stderr


# -- validation --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("release", RELEASES)
def test_core_kinds_validate(rendered: dict[str, list[Obj]], release: str) -> None:
    assert release in {kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()}, (
        f"kubernetes-validate {kubernetes_validate.__version__} has no schemas for {release}"
    )
    checked = 0
    for where, objs in rendered.items():
        for o in objs:
            if o["apiVersion"].startswith("monitoring.coreos.com/"):
                continue
            try:
                got = kubernetes_validate.validate(o, release, strict=True)
            except kubernetes_validate.ValidationError as e:
                pytest.fail(
                    f"{where}: {o['kind']}/{o['metadata']['name']} for {release}: "
                    f"{'.'.join(map(str, e.path))}: {e.message}"
                )
            assert got == release
            checked += 1
    assert checked >= 3 * 6


def test_the_validator_rejects_a_broken_daemonset(rendered: dict[str, list[Obj]]) -> None:
    ds = copy.deepcopy(one_of(rendered["base"], "DaemonSet"))
    ds["spec"]["template"]["spec"]["hostNetwork"] = "yes"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, RELEASES[-1], strict=True)
    ds = copy.deepcopy(one_of(rendered["base"], "DaemonSet"))
    ds["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = []  # a typo: strict rejects it
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, RELEASES[-1], strict=True)


def _closed(schema: Any) -> Any:
    """The schema with every object that lists its properties closed to others (strict field validation)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def podmonitor_validator() -> jsonschema.protocols.Validator:
    schema = _closed(json.loads(PODMONITOR_SCHEMA.read_text()))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_podmonitor_validates_against_the_operator_schema(rendered: dict[str, list[Obj]]) -> None:
    pm = one_of(rendered["overlays/prometheus-operator"], "PodMonitor")
    errors = sorted(podmonitor_validator().iter_errors(pm), key=lambda e: list(e.path))
    assert not errors, [f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors]
    broken = copy.deepcopy(pm)
    broken["spec"]["podMetricsEndpoints"][0]["intervall"] = "60s"
    assert list(podmonitor_validator().iter_errors(broken))
    broken = copy.deepcopy(pm)
    broken["spec"]["podMetricsEndpoints"][0]["interval"] = "a minute"
    assert list(podmonitor_validator().iter_errors(broken))


def test_podmonitor_selects_the_agent_and_its_port(rendered: dict[str, list[Obj]]) -> None:
    objs = rendered["overlays/prometheus-operator"]
    pm = one_of(objs, "PodMonitor")
    ds = one_of(objs, "DaemonSet")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pm["spec"]["namespaceSelector"]["matchNames"] == [ds["metadata"]["namespace"]]
    ports = {p["name"]: p["containerPort"] for p in agent_container(objs)["ports"]}
    (endpoint,) = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports


# -- what the agent needs -------------------------------------------------------------------------------


def _agent_args(container: Obj) -> list[str]:
    return [*container.get("command", [])[1:], *container["args"]]


def test_daemonset_runs_the_agent_on_every_node_reading_the_host(rendered: dict[str, list[Obj]]) -> None:
    ds = one_of(rendered["base"], "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True and spec["hostPID"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert {"operator": "Exists"} in spec["tolerations"]  # no key: every taint
    c = agent_container(rendered["base"])
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    host = mounts["/host"]
    assert host["readOnly"] is True and volumes[host["name"]]["hostPath"]["path"] == "/"
    lock = mounts["/run/xtables.lock"]
    assert volumes[lock["name"]]["hostPath"] == {"path": "/run/xtables.lock", "type": "FileOrCreate"}
    assert not lock.get("readOnly")
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["XTABLES_LOCKFILE"]["value"] == "/run/xtables.lock"
    args = _agent_args(c)
    assert args[0] == "agent" and "--host-root=/host" in args
    listen = next(a for a in args if a.startswith("--listen="))
    port = int(listen.rsplit(":", 1)[1])
    assert {"name": "metrics", "containerPort": port, "protocol": "TCP"} in c["ports"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert not sc.get("privileged")


def test_daemonset_arguments_are_the_agents_options(rendered: dict[str, list[Obj]]) -> None:
    """The container's arguments, parsed by kpdoctor's own command line (not run): a renamed or
    mistyped option fails here, not on the nodes."""
    args = _agent_args(agent_container(rendered["base"]))
    cmd = kpdoctor_app.commands[args[0]]
    ctx = cmd.make_context("kpdoctor agent", list(args[1:]))
    assert ctx.params["host_root"] == "/host"
    # the node's own address (POD_IP on hostNetwork) for probes and Prometheus, loopback for /run and
    # /report: never every address
    assert ctx.params["listen"] == ("$(POD_IP):9847", "127.0.0.1:9847")
    with pytest.raises(Exception, match="No such option"):
        cmd.make_context("kpdoctor agent", ["--host-rot=/host"])


def _cpu(q: str) -> float:
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def _bytes(q: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "K": 1e3, "M": 1e6, "G": 1e9}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]i?)?", q)
    assert m, q
    return float(m[1]) * units.get(m[2] or "", 1)


def test_resources_follow_the_measurements(rendered: dict[str, list[Obj]]) -> None:
    """The base's requests and limits hold what bench/README.md measured at 10,000 Services."""
    res = agent_container(rendered["base"])["resources"]
    assert _bytes(res["requests"]["memory"]) >= MEASURED_RSS_MB * 1e6 * 1.1
    assert _bytes(res["limits"]["memory"]) >= 1.5 * MEASURED_RSS_MB * 1e6
    assert _bytes(res["limits"]["memory"]) >= 1.4 * MEASURED_PEAK_MB * 1e6  # a full pass's peak, with room
    # the average at the default 300 s interval fits the request; the loop's bound is the limit
    assert _cpu(res["requests"]["cpu"]) >= MEASURED_CYCLE_CPU / 300
    assert _cpu(res["limits"]["cpu"]) == 0.5
    small = agent_container(rendered["overlays/small-cluster"])["resources"]
    assert _bytes(small["requests"]["memory"]) < _bytes(res["requests"]["memory"])
    assert _bytes(small["limits"]["memory"]) > _bytes(small["requests"]["memory"])
    # the overlay changes the resources only
    base_ds, small_ds = one_of(rendered["base"], "DaemonSet"), one_of(rendered["overlays/small-cluster"], "DaemonSet")
    a, b = copy.deepcopy(base_ds), copy.deepcopy(small_ds)
    a["spec"]["template"]["spec"]["containers"][0].pop("resources")
    b["spec"]["template"]["spec"]["containers"][0].pop("resources")
    assert a == b


# -- RBAC --------------------------------------------------------------------------------------------------


def _allowed(rules: list[Obj], group: str, resource: str, verb: str, name: str | None = None) -> bool:
    for r in rules:
        if group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", []):
            names = r.get("resourceNames")
            if not names or (name is not None and name in names):
                return True
    return False


def _bound_rules(objs: list[Obj], kind: str, namespace: str | None) -> list[Obj]:
    """The rules of every ``kind`` (ClusterRole/Role) bound to the kpdoctor ServiceAccount."""
    sa = one_of(objs, "ServiceAccount")
    who = {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    binding_kind = "ClusterRoleBinding" if kind == "ClusterRole" else "RoleBinding"
    roles = {o["metadata"]["name"]: o for o in by_kind(objs, kind) if o["metadata"].get("namespace") == namespace}
    out: list[Obj] = []
    for b in by_kind(objs, binding_kind):
        if who in b["subjects"] and b["roleRef"]["kind"] == kind and b["roleRef"]["name"] in roles:
            if kind == "Role" and b["metadata"]["namespace"] != namespace:
                continue
            out += roles[b["roleRef"]["name"]]["rules"]
    return out


# What the agent asks the API (docs/agent.md, Permissions): (group, resource, verb)
AGENT_NEEDS = [
    *[("", r, v) for r in ("services", "nodes", "pods", "endpoints") for v in ("list", "watch")],
    ("discovery.k8s.io", "endpointslices", "list"),
    ("discovery.k8s.io", "endpointslices", "watch"),
    ("", "events", "create"),
    ("", "events", "patch"),
    ("", "nodes/status", "patch"),
]
NEVER = [
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "configmaps", "list"),
    ("", "pods", "create"),
    ("", "pods", "delete"),
    ("", "pods/exec", "create"),
    ("", "nodes", "patch"),
    ("", "nodes", "update"),
    ("", "nodes/status", "update"),
    ("", "services", "patch"),
    ("", "events", "delete"),
    ("apps", "daemonsets", "list"),
    ("discovery.k8s.io", "endpointslices", "create"),
]


def test_rbac_is_what_the_agent_uses(rendered: dict[str, list[Obj]]) -> None:
    objs = rendered["base"]
    cluster = _bound_rules(objs, "ClusterRole", None)
    for need in AGENT_NEEDS:
        assert _allowed(cluster, *need), need
    for never in NEVER:
        assert not _allowed(cluster, *never), never
    assert not any("*" in r.get("verbs", []) or "*" in r.get("resources", []) for r in cluster)
    system = _bound_rules(objs, "Role", "kube-system")
    assert _allowed(system, "", "configmaps", "get", "kube-proxy")
    assert _allowed(system, "apps", "daemonsets", "get", "kube-proxy")
    assert not _allowed(system, "", "configmaps", "get", "coredns")
    assert not _allowed(system, "", "configmaps", "list")
    assert not _allowed(system, "", "secrets", "get", "kube-proxy")
    for r in system:
        assert r["resourceNames"] == ["kube-proxy"] and r["verbs"] == ["get"]


# -- the image definition ---------------------------------------------------------------------------------


def _dockerfile_instructions() -> Iterator[tuple[str, str]]:
    text = (DEPLOY / "image" / "Dockerfile").read_text()
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            yield word.upper(), rest.strip()


def test_image_is_debian_without_the_tools_kpdoctor_must_take_from_the_node() -> None:
    """The image must never hold an iptables, nft or ipvsadm that could be run instead of the node's."""
    steps = list(_dockerfile_instructions())
    assert steps[0][0] in ("FROM", "ARG")
    froms = [rest.split()[0] for word, rest in steps if word == "FROM"]
    # the image itself is Debian; a build stage is Debian too, the same release (Rust's official
    # image on bookworm builds the native core against the image's own libc)
    assert froms and froms[-1].startswith(("debian:", "docker.io/library/debian:")), froms
    release = froms[-1].partition(":")[2].split("-")[0]
    for f in froms[:-1]:
        assert f.startswith(("debian:", "rust:")) and release in f, froms
    installs = " ".join(rest for word, rest in steps if word == "RUN")
    for tool in ("iptables", "nftables", "ipvsadm", "ipset", "conntrack"):
        assert not re.search(rf"\b{tool}\b", installs), tool
    entry = next(rest for word, rest in steps if word == "ENTRYPOINT")
    assert json.loads(entry)[-1].endswith("kpdoctor")
    script = (DEPLOY / "image" / "build-rootfs.sh").read_text()
    assert "mmdebstrap" in script
    includes = re.search(r"--include=(\S+)", script)
    assert includes is not None
    for tool in ("iptables", "nftables", "ipvsadm", "ipset", "conntrack"):
        assert tool not in includes[1].split(","), tool


# -- the DaemonSet's capabilities and the image, against this machine as a node ---------------------------


def _root_with_mounts() -> str | None:
    """Why the tests that mount the node's root cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (mounts the node's / read-only, as the DaemonSet does)"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"needs {tool} (util-linux)"
    return None


def _live_bundle(tmp: Path, name: str, caps: list[str] | None, chroot_image: Path | None = None) -> Obj:
    """``kpdoctor diagnose --live --host-root HOST`` in a private mount namespace where HOST is this
    machine's / bound read-only; with ``caps``, as root holding only those capabilities (setpriv's
    bounding set, as the container runtime sets it). Returns the saved bundle's manifest."""
    host = tmp / f"{name}-host"
    host.mkdir()
    out = tmp / f"{name}.tar.gz"
    kpdoctor = str(Path(sys.executable).parent / "kpdoctor")
    argv = [
        kpdoctor,
        "diagnose",
        "--live",
        "--host-root",
        str(host),
        "--no-cluster",
        "--interval",
        "0.5",
        "--format",
        "json",
        "--output",
        str(tmp / f"{name}.json"),
        "--save-bundle",
        str(out),
    ]
    mounts = f"mount --rbind / {host} && mount -o remount,bind,ro {host}"
    if chroot_image is not None:  # the image's own kpdoctor, the node at /host inside it
        inside = chroot_image / "host"
        inside.mkdir(exist_ok=True)
        mounts = (
            f"mount --rbind / {inside} && mount -o remount,bind,ro {inside} && mount -t proc proc "
            f"{chroot_image}/proc && mount -t tmpfs tmpfs {chroot_image}/tmp"
        )
        argv = [
            "chroot",
            str(chroot_image),
            "/opt/kpdoctor/bin/kpdoctor",
            "diagnose",
            "--live",
            "--host-root",
            "/host",
            "--no-cluster",
            "--interval",
            "0.5",
            "--format",
            "json",
            "--output",
            "/tmp/r.json",
            "--save-bundle",
            "/tmp/b.tar.gz",
        ]
    if caps is not None:
        bounding = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
        argv = ["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all", *argv]
    script = f"{mounts} && exec {' '.join(argv)}"
    if chroot_image is not None:
        script = f"{mounts} && {' '.join(argv)}; rc=$?; cp {chroot_image}/tmp/b.tar.gz {out}; exit $rc"
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1, 3), done.stderr
    with tarfile.open(out) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("manifest.json"))
        fh = tar.extractfile(member)
        assert fh is not None
        manifest: Obj = json.load(fh)
    return manifest


def _outcomes(manifest: Obj) -> dict[str, tuple[int | None, bool]]:
    """Each artifact's exit code and whether it has content; what was not collected, as None."""
    out = {a["path"]: (a.get("exit_code"), bool(a.get("bytes"))) for a in manifest["artifacts"]}
    for n in manifest.get("not_collected") or []:
        out.setdefault(n["path"] if isinstance(n, dict) else str(n), (None, False))
    return out


def test_the_daemonsets_capabilities_read_what_root_reads(rendered: dict[str, list[Obj]], tmp_path: Path) -> None:
    """Root holding only the container's capabilities collects this machine (as the node, read-only
    at --host-root, its binaries run chrooted) exactly as full root does; without NET_ADMIN and
    NET_RAW it does not (the comparison can fail)."""
    why = _root_with_mounts()
    if why:
        pytest.skip(why)
    caps = agent_container(rendered["base"])["securityContext"]["capabilities"]["add"]
    full = _outcomes(_live_bundle(tmp_path, "root", None))
    limited = _outcomes(_live_bundle(tmp_path, "caps", caps))
    differ = {k: (full.get(k), limited.get(k)) for k in set(full) | set(limited) if full.get(k) != limited.get(k)}
    assert not differ, differ
    read = [k for k, v in full.items() if v[0] == 0 and k.startswith(("node/iptables", "node/nft", "node/ipset"))]
    assert read, full  # there was something that needs the capabilities
    without_net = [c for c in caps if c not in ("NET_ADMIN", "NET_RAW")]
    fewer = _outcomes(_live_bundle(tmp_path, "nonet", without_net))
    assert any(full.get(k) != fewer.get(k) for k in set(full) | set(fewer))


def test_image_rootfs_reads_the_node_with_the_nodes_binaries(tmp_path: Path) -> None:
    """The image built by deploy/image/build-rootfs.sh (``$KPDOCTOR_ROOTFS_TAR``): its kpdoctor,
    which has no iptables of its own, collects the node mounted at /host with the node's binaries."""
    tar = os.environ.get("KPDOCTOR_ROOTFS_TAR")
    if not tar:
        pytest.skip(
            "set KPDOCTOR_ROOTFS_TAR to a root filesystem built by deploy/image/build-rootfs.sh "
            "(building it needs Debian's archive and PyPI, so the tests do not)"
        )
    why = _root_with_mounts()
    if why:
        pytest.skip(why)
    image = tmp_path / "image"
    image.mkdir()
    subprocess.run(["tar", "-xf", tar, "-C", str(image)], check=True)
    for tool in ("iptables", "iptables-save", "iptables-legacy-save", "nft", "ipvsadm"):
        assert not any((image / d / tool).exists() for d in ("usr/sbin", "usr/bin", "sbin", "bin")), tool
    manifest = _live_bundle(tmp_path, "image", None, chroot_image=image)
    got = _outcomes(manifest)
    assert manifest.get("host_root") == "/host"
    saves = [a for a in manifest["artifacts"] if a["path"].startswith("node/iptables") and a.get("binary")]
    assert saves and all(a["exit_code"] == 0 for a in saves), saves
    assert got.get("node/uname.txt") == (0, True)

"""The live collector's building blocks: what may run, how long, and what is found where.

These run real commands and read real files laid out like a node's (no root needed); the lab
(tests/lab/test_live_*.py) runs the whole collector in network namespaces.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from kpdoctor.cli import app
from kpdoctor.collect.kube_proxy import _cri_logs, _systemd_unit, find_kube_proxy
from kpdoctor.collect.node import Kernel
from kpdoctor.collect.node_files import resolve_in_root
from kpdoctor.collect.record import Budget, Collected, NotCollected
from kpdoctor.collect.runner import Host, Runner, is_elf, run_argv


def test_symlinks_resolve_inside_the_given_root(tmp_path: Path) -> None:
    root = tmp_path / "container"
    (root / "usr/sbin").mkdir(parents=True)
    (root / "usr/sbin/xtables-nft-multi").write_bytes(b"\x7fELF....")
    os.symlink("/usr/sbin/xtables-nft-multi", root / "usr/sbin/iptables")  # absolute: inside the root
    os.symlink("iptables", root / "usr/sbin/iptables-save")
    assert resolve_in_root(str(root), "/usr/sbin/iptables-save") == "/usr/sbin/xtables-nft-multi"
    os.symlink("/usr/sbin/loop2", root / "usr/sbin/loop1")
    os.symlink("/usr/sbin/loop1", root / "usr/sbin/loop2")
    assert resolve_in_root(str(root), "/usr/sbin/loop1") is None
    assert resolve_in_root(str(root), "/usr/sbin/missing") is None


def test_only_binaries_run_never_scripts(tmp_path: Path) -> None:
    """kube-proxy images ship iptables-wrapper, a script that relinks iptables on first use."""
    root = tmp_path / "container"
    (root / "usr/sbin").mkdir(parents=True)
    wrapper = root / "usr/sbin/iptables-wrapper"
    wrapper.write_text("#!/bin/sh\nln -sf xtables-nft-multi /usr/sbin/iptables\n")
    wrapper.chmod(0o755)
    os.symlink("iptables-wrapper", root / "usr/sbin/iptables")
    runner = Runner(Host(), Budget(10))
    got = runner.command("kube-proxy/iptables-version.txt", ["iptables", "--version"], root=str(root))
    assert isinstance(got, NotCollected) and "not an executable binary: not run" in got.reason
    assert not is_elf(str(wrapper)) and is_elf(sys.executable)


def test_a_missing_program_is_not_collected_with_the_reason() -> None:
    got = Runner(Host(), Budget(10)).command("node/ipvsadm-list.txt", ["no-such-tool-kpd", "-Ln"])
    assert isinstance(got, NotCollected) and got.reason == "no-such-tool-kpd is not installed"


def test_a_command_that_overruns_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "child-still-ran"
    script = f"import subprocess,time; subprocess.Popen(['sh','-c','sleep 2; touch {marker}']); time.sleep(30)"
    t0 = time.monotonic()
    got = run_argv("node/x.txt", [sys.executable, "-c", script], timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert got.exit_code is None and "timed out after 0.5s" in got.stderr and got.note
    time.sleep(2.5)
    assert not marker.exists(), "the whole process group was killed"


def test_failures_are_recorded_not_raised() -> None:
    got = run_argv("node/x.txt", [sys.executable, "-c", "import sys; print('part'); sys.exit('boom')"], 10)
    assert isinstance(got, Collected)
    assert (got.exit_code, got.data, got.stderr.strip()) == (1, b"part\n", "boom")
    entry = got.manifest_entry()
    assert entry["exit_code"] == 1 and entry["stderr"].strip() == "boom" and entry["bytes"] == 5


def test_the_budget_bounds_every_step() -> None:
    budget = Budget(0.01)
    time.sleep(0.05)
    got = Runner(Host(), budget).command("node/uname.txt", ["uname", "-a"])
    assert isinstance(got, NotCollected) and "time bound was reached" in got.reason


def test_commands_get_a_fixed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/tmp/evil.so")
    monkeypatch.setenv("XTABLES_LOCKFILE", "/tmp/lab.lock")
    got = run_argv("x", [sys.executable, "-c", "import os; print(sorted(os.environ.items()))"], 10)
    env = dict(eval(got.data.decode()))
    assert "LD_PRELOAD" not in env and env["LC_ALL"] == "C" and env["XTABLES_LOCKFILE"] == "/tmp/lab.lock"


def test_proc_files_are_read_in_small_pieces() -> None:
    got = Runner(Host(), Budget(10)).read("node/hostname", "/proc/sys/kernel/hostname")
    assert isinstance(got, Collected) and got.data.strip() == os.uname().nodename.encode()


def test_logs_keep_their_newest_part(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(100_000)))
    got = Runner(Host(), Budget(10)).read("kube-proxy/log.txt", str(log), limit=1000, tail=True)
    assert isinstance(got, Collected)
    assert got.data.endswith(b"line 99999\n") and got.data.startswith(b"line ") and len(got.data) <= 1000
    assert "last" in got.note


def test_host_root_runs_the_nodes_binaries_chrooted() -> None:
    host = Host("/host", enter_netns=True)
    assert host.argv(["iptables-save"]) == ["chroot", "/host", "nsenter", "--net=/proc/1/ns/net", "--", "iptables-save"]
    assert host.path("/proc/locks") == "/host/proc/locks"
    assert host.net_proc("net/ip_tables_names") == "/proc/1/net/ip_tables_names"  # a path on the node
    assert host.path(host.net_proc("net/ip_tables_names")) == "/host/proc/1/net/ip_tables_names"
    assert Host().net_proc("net/ip_tables_names") == "/proc/self/net/ip_tables_names"
    assert Host.detect("/") == Host("/", False)


def _fake_root(tmp_path: Path, modules: str | None, builtin: str = "", sysmod: tuple[str, ...] = ()) -> Kernel:
    if modules is not None:
        (tmp_path / "proc").mkdir()
        (tmp_path / "proc/modules").write_text(modules)
    lib = tmp_path / f"lib/modules/{os.uname().release}"
    lib.mkdir(parents=True)
    (lib / "modules.builtin").write_text(builtin)
    for m in sysmod:
        (tmp_path / "sys/module" / m).mkdir(parents=True)
    return Kernel(str(tmp_path))


def test_a_module_counts_only_when_already_there(tmp_path: Path) -> None:
    k = _fake_root(
        tmp_path,
        "ip_vs 176128 0 - Live 0x0000000000000000\nnf_conntrack 172032 1 ip_vs, Live 0x0\n",
        builtin="kernel/net/netfilter/nf_tables.ko\n",
        sysmod=("ip_set",),
    )
    assert k.present("ip_vs") and k.present("nf_tables") and k.present("ip_set")
    assert not k.present("nf_conntrack_netlink")  # conntrack -S would load it: /proc is read instead


def test_a_kernel_without_module_support_can_load_nothing(tmp_path: Path) -> None:
    assert _fake_root(tmp_path, None).present("nf_conntrack_netlink")


def test_kube_proxy_is_found_by_its_program_not_by_mention(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, argv in {
        1: ["/sbin/init"],
        210: ["/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=n1"],
        300: ["pgrep", "kube-proxy"],
        400: ["/go-runner", "--log-file=/var/log/kube-proxy.log", "--", "/usr/local/bin/kube-proxy", "--v=2"],
    }.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    (proc / "self").mkdir()
    found = find_kube_proxy(str(tmp_path))
    assert [pid for pid, _ in found] == [210, 400]
    assert found[0][1][1] == "--config=/var/lib/kube-proxy/config.conf"


def test_the_newest_kube_proxy_pod_log_and_its_previous_one(tmp_path: Path) -> None:
    pods = tmp_path / "var/log/pods"
    old = pods / "kube-system_kube-proxy-aaaaa_11111111-1111/kube-proxy"
    new = pods / "kube-system_kube-proxy-bbbbb_22222222-2222/kube-proxy"
    other = pods / "kube-system_coredns-ccccc_3333/coredns"
    for d, files in ((old, ["0.log"]), (new, ["1.log", "2.log", "2.log.20261121-101500.gz"]), (other, ["0.log"])):
        d.mkdir(parents=True)
        for f in files:
            (d / f).write_text("x\n")
    os.utime(old / "0.log", (1, 1))
    current, previous = _cri_logs(str(tmp_path)) or ("", None)
    assert current == "/var/log/pods/kube-system_kube-proxy-bbbbb_22222222-2222/kube-proxy/2.log"  # on the node
    assert previous is not None and previous.endswith("/1.log")
    shutil.rmtree(new)
    assert _cri_logs(str(tmp_path)) == ("/var/log/pods/kube-system_kube-proxy-aaaaa_11111111-1111/kube-proxy/0.log", None)
    assert _cri_logs(str(tmp_path / "nowhere")) is None


def test_a_systemd_kube_proxy_is_read_from_its_unit(tmp_path: Path) -> None:
    cg = tmp_path / "proc/77/cgroup"
    cg.parent.mkdir(parents=True)
    cg.write_text("0::/system.slice/kube-proxy.service\n")
    assert _systemd_unit(str(tmp_path), 77) == "kube-proxy.service"
    cg.write_text("0::/kubepods.slice/kubepods-besteffort.slice/cri-containerd-abc.scope\n")
    assert _systemd_unit(str(tmp_path), 77) is None


# -- the command line ----------------------------------------------------------------------------

cli = CliRunner()


def test_diagnose_needs_files_or_live() -> None:
    res = cli.invoke(app, ["diagnose"])
    assert res.exit_code == 2 and "--live" in res.output


def test_save_bundle_only_goes_with_live(tmp_path: Path) -> None:
    res = cli.invoke(app, ["diagnose", "--save-bundle", str(tmp_path / "b.tar.gz"), str(tmp_path)])
    assert res.exit_code == 2 and "--save-bundle only goes with --live" in res.output


def test_a_host_root_without_proc_is_refused(tmp_path: Path) -> None:
    res = cli.invoke(app, ["collect", "--host-root", str(tmp_path), "-o", str(tmp_path / "b.tar.gz")])
    assert res.exit_code == 2 and "no proc/ under it" in res.output


@pytest.mark.skipif(os.geteuid() == 0, reason="as root, collection is allowed")
def test_collection_needs_root(tmp_path: Path) -> None:
    res = cli.invoke(app, ["collect", "-o", str(tmp_path / "b.tar.gz")])
    assert res.exit_code == 2 and "needs root" in res.output


def test_collect_refuses_a_busy_output_before_collecting(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    t0 = time.monotonic()
    res = cli.invoke(app, ["collect", "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and "not an empty folder" in res.output and time.monotonic() - t0 < 2
    res = cli.invoke(app, ["collect", "-o", str(tmp_path / "no" / "such" / "b.tar.gz")])
    assert res.exit_code == 2 and "no folder" in res.output


# An nft built without JSON support (kube-proxy's image once shipped one: "JSON support not
# compiled-in"), as a small static program in a node root: the collector keeps its version and
# its failed `-j` attempt, then takes the text listing, which kpdoctor reads the same.
NO_JSON_NFT = r"""
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--version") == 0) { puts("nftables v1.0.6 (Lester Gooch #5)"); return 0; }
    if (argc > 1 && strcmp(argv[1], "-j") == 0) { fputs("Error: JSON support not compiled-in\n", stderr); return 1; }
    puts("table ip kube-proxy {");
    puts("\tchain nat-prerouting {");
    puts("\t\ttype nat hook prerouting priority dstnat; policy accept;");
    puts("\t}");
    puts("}");
    return 0;
}
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot into the node root needs root")
def test_nft_without_json_support_falls_back_to_the_text_listing(tmp_path: Path) -> None:
    from kpdoctor.bundle.layout import BUNDLE_PATHS
    from kpdoctor.collect.node import NodeCollection, _nft_ruleset
    from kpdoctor.collect.record import Budget
    from kpdoctor.collect.runner import Runner

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("a C compiler is needed (scripts/test installs gcc)")
    root = tmp_path / "node"
    (root / "usr/sbin").mkdir(parents=True)
    src = tmp_path / "nft.c"
    src.write_text(NO_JSON_NFT)
    res = subprocess.run(
        [cc, "-static", "-O1", "-o", str(root / "usr/sbin/nft"), str(src)], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    out = NodeCollection()
    _nft_ruleset(Runner(Host(str(root)), Budget(30)), lambda _: None, out)
    version, js, text = (out.get(p) for p in ("node/nft-version.txt", "node/nft-ruleset.json", "node/nft-ruleset.txt"))
    assert version is not None and version.data.startswith(b"nftables v1.0.6")
    assert js is not None and js.exit_code == 1 and "JSON support not compiled-in" in js.stderr
    assert text is not None and text.exit_code == 0 and text.data.startswith(b"table ip kube-proxy {")
    kinds = {p: BUNDLE_PATHS[p][0].value for p in ("node/nft-version.txt", "node/nft-ruleset.txt")}
    assert kinds == {"node/nft-version.txt": "nft --version", "node/nft-ruleset.txt": "nft list ruleset output"}


def test_the_cni_configuration_in_use_is_the_first_by_name(tmp_path: Path) -> None:
    """As libcni picks it: the first `.conflist`/`.conf`/`.json` file by name, in the runtime's
    directory (k3s's own when /etc/cni/net.d has none)."""
    from kpdoctor.collect.node import NodeCollection, _cni_config

    runner = Runner(Host(str(tmp_path), enter_netns=False), Budget(10))
    out = NodeCollection()
    _cni_config(runner, out)
    assert [n.path for n in out.skipped] == ["node/cni-config.json"] and not out.artifacts
    k3s = tmp_path / "var/lib/rancher/k3s/agent/etc/cni/net.d"
    k3s.mkdir(parents=True)
    (k3s / "10-flannel.conflist").write_text('{"cniVersion": "1.0.0", "name": "cbr0", "plugins": []}\n')
    etc = tmp_path / "etc/cni/net.d"
    etc.mkdir(parents=True)
    (etc / "README").write_text("not a configuration\n")
    (etc / "87-podman.conflist").write_text('{"name": "podman"}\n')
    (etc / "10-calico.conflist").write_text('{"name": "k8s-pod-network"}\n')
    out = NodeCollection()
    _cni_config(runner, out)
    (got,) = out.artifacts
    assert isinstance(got, Collected) and got.path == "node/cni-config.json"
    assert b"k8s-pod-network" in got.data and got.source == "read /etc/cni/net.d/10-calico.conflist"


def test_the_kernels_build_configuration_is_unpacked_bounded(tmp_path: Path) -> None:
    """/proc/config.gz unpacked (this machine's own), /boot/config-RELEASE without it, and a file
    that is no gzip or unpacks past the bound said so, never read."""
    import gzip

    from kpdoctor.collect import node

    runner = Runner(Host(str(tmp_path), enter_netns=False), Budget(10))
    assert isinstance(node._kernel_config(runner), NotCollected)  # neither is there
    text = (Path(__file__).parent / "data" / "kernel_config" / "config-6.18.44.txt").read_bytes()
    boot = tmp_path / "boot" / f"config-{os.uname().release}"
    boot.parent.mkdir()
    boot.write_bytes(text)
    got = node._kernel_config(runner)
    assert isinstance(got, Collected) and got.data == text and got.source == f"read /boot/config-{os.uname().release}"
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "config.gz").write_bytes(gzip.compress(text))
    got = node._kernel_config(runner)
    assert isinstance(got, Collected) and got.data == text and got.source == "read /proc/config.gz (unpacked)"
    (tmp_path / "proc" / "config.gz").write_bytes(text)  # not gzip
    assert "does not unpack" in getattr(node._kernel_config(runner), "reason", "")
    (tmp_path / "proc" / "config.gz").write_bytes(gzip.compress(b"#" * (node.KERNEL_CONFIG_TEXT_MAX + 1)))
    assert "unpacks past" in getattr(node._kernel_config(runner), "reason", "")

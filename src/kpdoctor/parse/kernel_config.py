"""The kernel's build configuration: a config file (``/boot/config-$(uname -r)``, ``zcat
/proc/config.gz``, a grep of either) and what Docker's and k3s's ``check-config`` say of it.

A kernel built without an option has neither the code nor a module of it: no ``modprobe`` can
load it, which makes the configuration the proof that a part kube-proxy needs cannot exist.

How the programs print it:

- Kconfig's ``.config`` (scripts/kconfig/confdata.c, every release): ``CONFIG_NAME=y`` (built in),
  ``=m`` (a module), ``="text"`` or a number for other types, and ``# CONFIG_NAME is not set`` for
  an option that could be chosen and was not; an option whose dependencies are not met is left out
  altogether. A whole file opens with ``# Automatically generated file; DO NOT EDIT.`` and
  ``# Linux/<arch> <release> Kernel Configuration``: in a whole file an option that is not there
  is not built; in a grep of it, nothing can be said of an option it does not show.
- moby's ``contrib/check-config.sh`` (Docker; ``check_flag``): ``- CONFIG_NAME: enabled``,
  ``enabled (as module)`` or ``missing``, some under a heading and indented (``sed 's/^/    /'``),
  after ``info: reading kernel config from PATH ...``; k3s's copy (``k3s check-config``,
  contrib/util/check-config.sh) prints ``missing (fail)`` for the options it requires. Both
  colour their words with terminal escapes (k3s even into a file): the paste reader takes them off.
  The script reads the running kernel's configuration (``/proc/config.gz``, else
  ``/boot/config-$(uname -r)``) unless given another path, and checks only the options it lists.

Nothing here raises.
"""

from __future__ import annotations

from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.evidence_shape import EvidenceShape

# a grep of several files puts the file's name first ("/boot/config-5.15.0-91-generic:CONFIG_X=m")
_PATH = r"/?[\w./+-]*config[\w./+-]*"
_NAME = r"CONFIG_[A-Z0-9_]{1,80}"
_FILE = rf"(?:(?P<file>{_PATH}):(?:\d+:)?)?"
_OPTION = rf"(?P<name>{_NAME})"
SET = lazy_re.compile(rf"^{_FILE}{_OPTION}=(?P<value>[ymn]|\"[^\"\n]*\"|-?(?:0x)?[0-9a-fA-F]{{1,20}})[ \t]*$")
NOT_SET = lazy_re.compile(rf"^{_FILE}# {_OPTION} is not set[ \t]*$")
CHECKED = lazy_re.compile(
    rf"^(?:- )?{_OPTION}: (?P<state>enabled \(as module\)|enabled|missing)(?P<fail> \(fail\))?[ \t]*$"
)
# any of the three, as a line's start (the shape's own lines: one pattern without named groups)
ROW = lazy_re.compile(
    rf"^[ \t]*(?:(?:{_PATH}:(?:\d+:)?)?(?:{_NAME}=(?:[ymn]|\"|-?[0-9])|# {_NAME} is not set)|"
    rf"(?:- )?{_NAME}: (?:enabled|missing))"
)
# the rest of check-config's output and a config file's comments
AROUND = lazy_re.compile(
    r"^[ \t]*(?:info: reading kernel config from |warning: .* does not exist, searching|"
    r"error: cannot find kernel config|"
    r"Generally Necessary:|Optional Features:|Limits:|System:|Firewall:|Verifying binaries in |"
    r"- (?:Network|Storage) Drivers:|- \"[\w ,]+\":|Optional \(for encrypted networks\):|"
    r"- (?:cgroup hierarchy|apparmor|sha256sum|links|swap|routes|firewalld|ufw|/proc/sys/kernel/keys/root_maxkeys|"
    r"/dev/zfs|zfs command|zpool command|cpu|cpuset|io|memory|pids|\S+ iptables v[\d.]+[^:]*): |Controllers:|"
    r"STATUS: |enable these ext[34] configs|\((?:cgroup|see|use|your|look|dangerous)|"
    r"# Automatically generated file|# Linux/\S+ \S+ Kernel Configuration|# Compiler: )"
)
_WHOLE = lazy_re.compile(r"^# (?:Automatically generated file; DO NOT EDIT\.|Linux/\S+ \S+ Kernel Configuration)")


@dataclass(frozen=True, slots=True)
class KernelOption:
    """One option as a line shows it."""

    line: int
    text: str
    name: str  # CONFIG_NETFILTER_XT_MATCH_COMMENT
    value: str  # "y" built in, "m" a module, "n" not built; another value as written ("0x1", '"text"')
    source: str  # "config" (a config file's line) | "check-config" (the script's verdict)
    whole: bool  # the line is in a whole config file: an option it leaves out is not built

    @property
    def built(self) -> bool | None:
        """Is the code there (built in or as a module)? None for a value that is no y/m/n."""
        return {"y": True, "m": True, "n": False}.get(self.value)


def parse_kernel_config(text: str, first_line: int = 1) -> list[KernelOption]:
    """Every option a config file's lines or check-config's verdicts show, in order."""
    lines = text.splitlines()
    whole = sum(1 for ln in lines[:40] if _WHOLE.match(ln)) >= 1 and len(lines) > 200
    out: list[KernelOption] = []
    for ln, raw in enumerate(lines, first_line):
        body = raw.strip()
        if not body or "CONFIG_" not in body:
            continue
        if (m := SET.match(body)) is not None:
            out.append(KernelOption(ln, body, m["name"], m["value"], "config", whole))
        elif (m := NOT_SET.match(body)) is not None:
            out.append(KernelOption(ln, body, m["name"], "n", "config", whole))
        elif (m := CHECKED.match(body)) is not None:
            value = "m" if "module" in m["state"] else "y" if m["state"] == "enabled" else "n"
            out.append(KernelOption(ln, body, m["name"], value, "check-config", False))
    return out


SHAPE = EvidenceShape(
    Kind.KERNEL_CONFIG,
    "kernel config",
    ROW,
    parse_kernel_config,
    around=AROUND,
    # Debian 12's docker.io 20.10 contrib/check-config.sh on this project's build machine (kernel
    # 6.18.44, /proc/config.gz), its colour codes taken off as a terminal shows them
    example=(
        "info: reading kernel config from /proc/config.gz ...\n"
        "\n"
        "Generally Necessary:\n"
        "- cgroup hierarchy: properly mounted [/sys/fs/cgroup]\n"
        "- CONFIG_NAMESPACES: enabled\n"
        "- CONFIG_NET_NS: enabled\n"
        "- CONFIG_PID_NS: enabled\n"
        "- CONFIG_IPC_NS: enabled\n"
        "- CONFIG_UTS_NS: enabled\n"
        "- CONFIG_CGROUPS: enabled\n"
        "- CONFIG_CGROUP_CPUACCT: enabled\n"
    ),
)

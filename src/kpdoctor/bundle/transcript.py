"""Split a pasted terminal session into its commands' outputs.

Tickets hold things like::

    root@node3:~# iptables --version
    iptables v1.8.4 (legacy)
    root@node3:~# kubectl -n kube-system logs kube-proxy-x7k2p | tail
    E1008 21:01:55.367127 ...

Each command's output is typed on its own; its ``first_line`` keeps the line number in the
original file so evidence still points to the right line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kpdoctor import lazy_re
from kpdoctor.bundle.artifacts import Kind
from kpdoctor.parse.k8s import GENERATED, pod_template
from kpdoctor.parse.shellwords import (
    MAX_CONTINUED,
    RUNTIME_CLIS,
    continued_on,
    entered,
    exec_parts,
    shell_split,
    typed_over,
    unwrapped,
)
from kpdoctor.parse.shellwords import PROMPT as _PROMPT
from kpdoctor.parse.structured import FENCE
from kpdoctor.parse.sysctl import sysctl_write

# Commands whose output kpdoctor may read; a prompt must run one of these (so that comments in
# iptables-save or YAML files are never taken for prompts).
KNOWN_COMMANDS = frozenset(
    [
        "ps",
        "iptables",
        "iptables-save",
        "iptables-legacy",
        "iptables-legacy-save",
        "iptables-nft",
        "iptables-nft-save",
        "ip6tables",
        "ip6tables-save",
        "ip6tables-legacy-save",
        "ip6tables-nft-save",
        "iptables-restore",
        "kubectl",
        "k",
        "crictl",
        "docker",
        "nerdctl",
        "journalctl",
        "uname",
        "cat",
        "grep",
        "egrep",
        "tail",
        "head",
        "less",
        "more",
        "systemctl",
        "dmesg",
        "ipvsadm",
        "ipset",
        "conntrack",
        "nft",
        "kube-proxy",
        "lsof",
        "fuser",
        "ss",
        "netstat",
        "sysctl",
        "lsmod",
        "hostname",
        "ls",
        "curl",
        "ip",
        "tr",
        "xargs",
        "lsb_release",
        "nstat",
        "date",
        "pgrep",
        "pidof",
        "modprobe",
        "modinfo",
        "stat",
        "find",
        "which",
        "rpm",
        "dpkg",
        "ufw",
        "firewall-cmd",
        "ethtool",
        "wc",
        "awk",
        "sed",
        "sort",
        "uniq",
        "crictl",
        "ctr",
        "k3s",
        "rke2",
        "microk8s",
        "minikube",
        "hostnamectl",
        "neofetch",
        "lsof",
    ]
)

MAX_COMMAND = 4096

# A command word a strong prompt (user@host, [user@host dir], /path #) may run even when it is
# not in KNOWN_COMMANDS: its output is then its own part, never merged into the previous one's.
_COMMAND_WORD = lazy_re.compile(r"^[\w.+-]+$")


@dataclass(frozen=True, slots=True)
class Part:
    command: str
    argv: list[str]  # the command run (inside ``nsenter``, ``ip netns exec``, ``chroot /host``)
    text: str
    first_line: int  # 1-based line number of the first output line in the original file
    # whose state the output shows, when the command line or the prompt says (``where``): "host",
    # "netns" (another network namespace), "kube-proxy" or "container"; None: the node's
    scope: str | None = None
    where: str = ""  # what said so: "nsenter -t 4242 -n", "the prompt root@nginx-7d9c-x2kq:/#"


# Whose shell a prompt is, from its user@host part or its form (a prompt that is only a path, as
# busybox's and most images' `sh` print it, is a container's): kube-proxy's Pod (its DaemonSet's
# name-xxxxx), or a Deployment's Pod (name-<ReplicaSet hash>-xxxxx, the suffixes of k8s's
# alphabet for generated names: no vowels, no 0/1/3).
_PROMPT_HOST = lazy_re.compile(r"(?:^|\[|\s)[\w.\-]+@(?P<host>[\w.\-]+)")
_KUBE_PROXY_POD = lazy_re.compile(rf"^kube-proxy-{GENERATED}{{5}}$")
_PATH_PROMPT = lazy_re.compile(r"^[ \t]*/[\w./-]*\s[#$]\s")


def prompt_scope(prompt: str) -> str | None:
    """Whose shell ``prompt`` (the text before the command) is, when it shows: "kube-proxy",
    "container", or None (a node's, or unknown)."""
    m = _PROMPT_HOST.search(prompt)
    if m is not None:
        host = m.group("host")
        if _KUBE_PROXY_POD.match(host):
            return "kube-proxy"
        return "container" if pod_template(host) is not None else None
    return "container" if _PATH_PROMPT.match(prompt) else None


def _typed_command(line: str, more: list[str] | None = None) -> tuple[str, list[str], str | None, str] | None:
    """(command, argv run, scope, what said the scope) of a prompt line (see :class:`Part`);
    ``more``: the lines the command continues on (:func:`_continues`)."""
    m = _PROMPT.match(line)
    if not m:
        return None
    cmd = typed_over([m.group("cmd"), *more]) if more else m.group("cmd")
    return _command(line, cmd.strip(), line[: m.start("cmd")], bool(m.group("strong")))


def _continues(line: str, after: list[str]) -> int:
    """How many of the lines ``after`` a prompt line its command continues on (the shell reads
    on after an open quote or an unfinished loop: :func:`continued_on`)."""
    m = _PROMPT.match(line)
    return continued_on(m.group("cmd"), after) if m else 0


# Command words that start English sentences as readily as commands: a line pasted without its
# prompt that starts with one is a command only when an option or a path follows.
_PROSE_WORDS = frozenset({"cat", "grep", "egrep", "tail", "head", "less", "more", "ps"})
_KUBECTL_VERBS = frozenset({"exec", "logs", "get", "describe", "delete", "-n", "--namespace", "debug"})


def bare_command(line: str) -> tuple[str, list[str], str | None, str] | None:
    """The command of a line pasted without its prompt, above what it printed (``kubectl exec
    web-0 -- cat /proc/1/cmdline``): a command kpdoctor reads the output of, with arguments."""
    cmd = line.strip()
    if not cmd or _PROMPT.match(line) or len(cmd) > MAX_COMMAND:
        return None
    got = _command(line, cmd, "", False)
    if got is None or len(got[1]) < 2:
        return None
    words = cmd.split()
    if words[0] == "k":  # kubectl's usual alias, or a letter
        return got if words[1] in _KUBECTL_VERBS else None
    if words[0] in _PROSE_WORDS and not words[1].startswith(("-", "/")):
        return None
    return got


def _command(line: str, cmd: str, prompt: str, strong: bool) -> tuple[str, list[str], str | None, str] | None:
    """(command, argv run, scope, what said the scope) of the command typed on ``line`` after
    ``prompt`` (``strong``: a prompt with a host or a path, which runs any command word)."""
    try:
        # a very long "prompt" line is not a command typed
        argv = shell_split(cmd) if len(cmd) <= MAX_COMMAND else cmd.split()
    except ValueError:
        argv = cmd.split()
    argv = unwrapped(argv)
    inner, scope = entered(argv)
    where = ""
    if scope is not None:
        where = " ".join(argv[: len(argv) - len(inner)])
        argv = unwrapped(inner)
    elif prompt:
        scope = prompt_scope(prompt)
        where = f"the prompt {prompt.strip()}" if scope is not None else ""
    if not argv:
        return None
    prog = argv[0].rsplit("/", 1)[-1]
    bare_hash = line.lstrip().startswith("#")
    # an unknown command is one only after a strong prompt, or when it sets a kernel setting
    # (`echo 0 > /proc/sys/...`: evidence of the value, whatever the prompt)
    # `$ ` is a prompt, never a comment: any command word after it starts a part of its own
    dollar = line.lstrip(" \t*_").startswith("$ ")
    if (
        prog not in KNOWN_COMMANDS
        and not ((strong or dollar) and _COMMAND_WORD.match(prog))
        and (bare_hash or sysctl_write(argv) is None)
    ):
        return None
    if bare_hash and (len(argv) < 2 and prog not in ("ps", "uname", "hostname", "lsmod")):
        return None  # "# iptables" alone is more likely a comment
    if bare_hash and prog == "kube-proxy" and not argv[1].startswith("-"):
        return None
    return cmd, argv, scope, where


_PROMPT_START = frozenset("[$#%>/\u276f\u279c")  # a prompt starts so, or is user@host or host:~#


def _prompt(line: str) -> tuple[str, list[str], str | None, str] | None:
    """The command of a prompt line (the cheap test first: most lines cannot be one)."""
    start = line.lstrip(" \t")[:1]
    if start and (start in _PROMPT_START or "@" in line or ":~" in line or ":/" in line):
        return _typed_command(line)
    return None


def has_prompt(text: str) -> bool:
    """Does any line look like a prompt running a known command?"""
    return any(_prompt(line) is not None for line in text.splitlines())


def split_transcript(text: str, lenient: bool = False, bare: bool = False) -> list[Part] | None:
    """The parts of a transcript, or None when the text is not a transcript.

    Output pasted before the first prompt is a part of its own, with no command (``argv`` empty).
    One prompt after other lines makes a transcript only when ``lenient`` (the text was not
    recognised as anything else): a comment in a file must not cut it in two. ``bare``: the
    first line may be a command pasted without its prompt (:func:`bare_command`; the text was
    not recognised as anything else)."""
    lines = text.splitlines()
    # the prompt pattern only on lines that could hold one (a 25 MB iptables-save has none)
    prompts = [(i, c) for i, line in enumerate(lines) if (c := _prompt(line)) is not None]
    # a markdown fence opening the paste is not content: the prompt after it starts the session
    first_content = next((i for i, line in enumerate(lines) if line.strip() and not FENCE.match(line)), 0)
    if bare and (not prompts or prompts[0][0] != first_content) and first_content + 1 < len(lines):
        typed = bare_command(lines[first_content])
        if typed is not None:
            prompts.insert(0, (first_content, typed))
    if not prompts:
        return None
    glued = _glued(lines, prompts)
    if glued:
        prompts = sorted([p for p in prompts if p[0] not in glued] + [(i, c) for i, (_, c) in glued.items()])
    # a command typed over several lines (an open quote, a trailing backslash): the lines it
    # continues on are its own, even those bash's `> ` continuation prompt makes look like prompts
    typed_to: dict[int, int] = {}
    kept: list[tuple[int, tuple[str, list[str], str | None, str]]] = []
    for i, c in prompts:
        if kept and i <= typed_to[kept[-1][0]]:
            continue
        more = _continues(lines[i], lines[i + 1 : i + 2 + MAX_CONTINUED])
        whole = _typed_command(lines[i], lines[i + 1 : i + 1 + more]) if more else None
        typed_to[i] = i + more if whole is not None else i
        kept.append((i, whole or c))
    prompts = kept
    if len(prompts) < 2 and prompts[0][0] != first_content and not lenient and not _strong(lines[prompts[0][0]]):
        return None
    # in a session, a caption naming a command starts that command's output (its line is prose),
    # and so does a file read typed without a prompt after a blank line (`cat /proc/sys/...`)
    taken = {i for i, _ in prompts} | {j for i, to in typed_to.items() for j in range(i, to + 1)}
    captions = [
        (i, c)
        for i, line in enumerate(lines)
        if i not in taken and ((c := _caption(line)) is not None or (c := _bare_read(lines, i)) is not None)
    ]
    if captions:
        prompts = sorted(prompts + captions, key=lambda p: p[0])
    parts: list[Part] = []
    if prompts[0][0] > first_content:
        parts.append(Part("", [], "\n".join(lines[: prompts[0][0]]) + "\n", 1))
    for n, (i, (cmd, argv, scope, where)) in enumerate(prompts):
        end = prompts[n + 1][0] if n + 1 < len(prompts) else len(lines)
        i = typed_to.get(i, i)
        body = lines[i + 1 : end] + ([glued[end][0]] if end in glued else [])
        # a prompt with no command after it (the session's last line, an Enter pressed) is not output
        body = ["" if _empty_prompt(b) else b for b in body]
        # a separator line the user drew (`=====`) ends the command's output: what follows it,
        # before the next prompt, is another output whose command is not shown
        cut = next((k for k, b in enumerate(body) if _SEPARATOR.match(b) and any(x.strip() for x in body[:k])), None)
        after = body[cut + 1 :] if cut is not None else []
        body = body[:cut] if cut is not None else body
        if not any(b.strip() for b in body) and sysctl_write(argv) is not None:
            # a write to /proc/sys prints nothing: the command line itself is the evidence
            parts.append(Part(cmd, argv, lines[i].strip() + "\n", i + 1, scope, where))
        else:
            parts.append(Part(cmd, argv, "\n".join(body) + ("\n" if body else ""), i + 2, scope, where))
        if cut is not None and any(a.strip() for a in after):
            parts.append(Part("", [], "\n".join(after) + "\n", i + 2 + cut + 1))
    return parts


# A line a user draws between outputs: eight or more of one of = - _ * # ~ and nothing else
_SEPARATOR = lazy_re.compile(r"^[ \t]*(?:={8,}|-{8,}|_{8,}|\*{8,}|~{8,})[ \t]*$")


def _empty_prompt(line: str) -> bool:
    """A prompt of a user at a host with nothing typed after it (`root@node:~#`, `[root@node ~]#`,
    zsh's `user@host dir %`): one of the prompt forms, as it would read with a command after it."""
    if "@" not in line or len(line) > 200:
        return False
    m = _PROMPT.match(line.rstrip() + " x")
    return m is not None and bool(m.group("strong")) and m.group("cmd") == "x"


# A line of prose naming the command whose output follows it ("coredns logs (`kubectl -n
# kube-system logs coredns-x`):", "Output of `iptables-save`:", "执行 `ipvsadm -Ln` 的结果："), as
# issue comments introduce a block: in a session, a part of its own with that command.
_CAPTION = lazy_re.compile(r"^ {0,3}[^`\s>][^`\n]{0,120}`(?P<cmd>[^`\n]{2,400})`[^`\n]{0,60}[:：]\s*$")


def _glued(
    lines: list[str], prompts: list[tuple[int, tuple[str, list[str], str | None, str]]]
) -> dict[int, tuple[str, tuple[str, list[str], str | None, str]]]:
    """Prompts printed after output that did not end its line (``curl -s localhost:10249/proxyMode``
    prints ``ipvs`` without a newline, so the next prompt follows on its line: ``ipvs[root@node01
    ~]# sysctl ...``): by line, the output before the prompt and the prompt's command. A prompt
    is taken there only in the form the session's other prompts have (the same ``user@host`` text),
    or bracketed (``[user@host dir]#``), and after a prompt line's part: the output is what
    ended it."""
    said = {i: m.group(0)[: m.start("cmd") - m.start(0)].strip() for i, _ in prompts if (m := _PROMPT.match(lines[i]))}
    seen = set(said.values()) - {""}
    out: dict[int, tuple[str, tuple[str, list[str], str | None, str]]] = {}
    for i, line in enumerate(lines):
        if i == 0 or not line.strip() or len(line) > MAX_COMMAND:
            continue
        if i in said:  # `iptablesroot@node01:~# uname -r`: the user name took the output in
            at = next((len(said[i]) - len(p) for p in seen if said[i].endswith(p) and len(said[i]) > len(p)), -1)
            at += len(line) - len(line.lstrip()) if at > 0 else 0
        else:
            m = _GLUED_BRACKET.search(line) if "]" in line and "@" in line else None
            at = m.start("prompt") if m is not None else next((line.find(p) for p in seen if line.find(p) > 0), -1)
        if at <= 0 or " " in line[:at].strip() or _PROMPT.match(line[:at]):
            continue
        c = _prompt(line[at:])
        if c is not None:
            out[i] = (line[:at], c)
    return out


# a bracketed prompt ([root@node01 ~]#) after a word the last command printed without a newline
_GLUED_BRACKET = lazy_re.compile(r"^\S{1,80}?(?P<prompt>\[[\w.-]+@[\w.-]+ [^\]\n]{1,60}\]\s?[#$]\s+\S)")


def _caption(line: str) -> tuple[str, list[str], str | None, str] | None:
    m = _CAPTION.match(line) if "`" in line else None
    return bare_command(m.group("cmd")) if m is not None else None


def _bare_read(lines: list[str], i: int) -> tuple[str, list[str], str | None, str] | None:
    """The command of line ``i`` when it reads a kernel file or setting without a prompt (``cat
    /proc/sys/net/core/somaxconn``, ``sysctl -n net.core.somaxconn``) after a blank line, with its
    value under it: in a session, the part that value is (not a line of the output before it)."""
    if i == 0 or i + 1 >= len(lines) or lines[i - 1].strip() or not lines[i + 1].strip():
        return None
    got = bare_command(lines[i]) if lines[i].lstrip().startswith(("cat ", "sysctl ", "sudo ")) else None
    if got is None:
        return None
    argv = got[1]  # without its wrappers (sudo)
    reads = argv[0] == "sysctl" or (argv[0] == "cat" and argv[1].startswith(("/proc/", "/sys/")))
    return got if reads else None


def _strong(line: str) -> bool:
    """A prompt no file's comment looks like (``root@node3:~#``, ``[root@node3 ~]#``, ``$ ``):
    one such prompt after other output starts a session of its own."""
    m = _PROMPT.match(line)
    return m is not None and (bool(m.group("strong")) or line.lstrip(" \t*_").startswith("$ "))


_RUNTIMES = ("kubectl", "k", "crictl", "docker", "nerdctl", "podman", "ctr")
_PROC_PID = lazy_re.compile(r"^/proc/(\d+)/cmdline$")
_PROXY_IMAGE = lazy_re.compile(r"kube-proxy|hyperkube|\bk3s\b|rke2")


# Options of `kubectl logs` (and the runtimes' `logs`) that take a value: the word after one is
# not the Pod or container
_LOGS_VALUED = frozenset(
    {
        "-n",
        "--namespace",
        "-c",
        "--container",
        "-l",
        "--selector",
        "--since",
        "--since-time",
        "--tail",
        "--context",
        "--kubeconfig",
        "--pod-running-timeout",
        "--max-log-requests",
        "--cluster",
        "--user",
        "-s",
        "--server",
        "--until",
        "-u",
        "--unit",
        "--identifier",
        "-t",
        "--boot",
        "-b",
    }
)


def log_source(words: list[str]) -> str | None:
    """Whose log a command prints: the Pod, workload, container or label value `kubectl logs`
    (or a runtime's `logs`) names, the unit `journalctl -u` names. The log's lines are that
    component's unless a line's own wrapper says otherwise (``parse.logwrap.writer_of``): a
    client-go error in CoreDNS's log is CoreDNS's, not kube-proxy's."""
    prog = words[0].rsplit("/", 1)[-1] if words else ""
    if prog == "journalctl":
        for i, w in enumerate(words[1:], 1):
            for flag in ("-u", "--unit", "-t", "--identifier"):
                if w == flag and i + 1 < len(words):
                    return words[i + 1]
                if w.startswith(flag + "=") or (len(flag) == 2 and w.startswith(flag) and len(w) > 2):
                    return w.split("=", 1)[1] if "=" in w else w[2:]
        return None
    if prog not in RUNTIME_CLIS or "logs" not in words[1:]:
        return None
    rest = words[words.index("logs") + 1 :]
    named: str | None = None
    container = selector = None
    i = 0
    while i < len(rest):
        w = rest[i]
        flag, eq, value = w.partition("=")
        if flag in ("-c", "--container", "-l", "--selector"):
            v = value if eq else (rest[i + 1] if i + 1 < len(rest) else "")
            if flag in ("-c", "--container"):
                container = v
            else:
                selector = v.split(",")[0].partition("=")[2] or v
        if w.startswith("-"):
            i += 2 if (not eq and flag in _LOGS_VALUED) else 1
            continue
        if named is None:
            named = w.split("/", 1)[-1]  # pod/x, deploy/x, ds/x
        i += 1
    return container or named or selector


# ethtool's options whose output kpdoctor reads (ethtool.c: -S, -k)
_ETHTOOL_KINDS = {
    "-S": Kind.NIC_STATS,
    "--statistics": Kind.NIC_STATS,
    "-k": Kind.NIC_FEATURES,
    "--show-features": Kind.NIC_FEATURES,
    "--show-offload": Kind.NIC_FEATURES,
}


def hint_from_command(argv: list[str]) -> dict[str, str]:
    """What a command line says about its output (backend, family, previous log, whose log it
    is, and ``kind``: the Kind value of an output that only its command types: `cat /proc/locks`,
    `sysctl -n`)."""
    hints: dict[str, str] = {}
    words = []
    for a in argv:
        if a == "|":
            break
        words.append(a)
    prog = words[0].rsplit("/", 1)[-1] if words else ""
    joined = " ".join(words)
    if prog in _RUNTIMES and ("exec" in words or "run" in words):
        # Output inside a container is the container's, not the host's: kube-proxy's when the
        # image, Pod or container is kube-proxy's (or a distribution binary that runs it).
        where = " ".join(words[1:])
        hints["scope"] = "kube-proxy" if _PROXY_IMAGE.search(where) else "container"
        _, inner = exec_parts(words)
        if inner:  # what the command run inside prints (`kubectl exec web-0 -- cat /proc/1/cmdline`)
            words, prog = inner, inner[0].rsplit("/", 1)[-1]
    if prog.startswith("ip6tables"):
        hints["family"] = "6"
    if "legacy" in prog:
        hints["backend"] = "legacy"
    elif "-nft" in prog:
        hints["backend"] = "nft"
    if prog in ("kubectl", "k", "crictl", "docker") and re.search(r"\s(-p|--previous)(\s|=|$)", " " + joined + " "):
        hints["previous"] = "true"
    source = log_source(words)
    if source:
        hints["log_of"] = source
    if prog == "hostname":
        hints["kind"] = Kind.HOSTNAME.value
    if prog == "ethtool" and len(words) > 1 and words[1] in _ETHTOOL_KINDS:
        hints["kind"] = _ETHTOOL_KINDS[words[1]].value  # its output grep'd without its header too
    if prog == "lsmod":
        hints["kind"] = Kind.MODULES.value
        if len(words) < len(argv):  # `lsmod | grep ip_vs`: what is listed is loaded, the rest unknown
            hints["fragment"] = "true"
    if prog in ("dpkg", "rpm") and len(words) > 2 and words[1] in ("-s", "-q", "--status", "--query", "-qa", "-l"):
        hints["kind"] = Kind.PACKAGES.value
        hints["package"] = words[2]
    if prog == "sysctl" and "-n" in words[1:] and len([w for w in words[1:] if not w.startswith("-")]) == 1:
        hints["kind"] = Kind.SYSCTL.value  # values only: the name comes from the command line
        hints["sysctl"] = next(w for w in words[1:] if not w.startswith("-")).replace("/", ".")
    if prog == "conntrack" and len(words) == len(argv) and ("-C" in words[1:] or "--count" in words[1:]):
        # the table's use, as nf_conntrack_count says it (conntrack.c's CT_COUNT: the kernel's
        # global entry count, read from that file by the releases that do not ask netlink)
        hints["kind"] = Kind.SYSCTL.value
        hints["sysctl"] = "net.netfilter.nf_conntrack_count"
    if prog == "cat" and len(words) > 1:
        target = words[1]
        if target.endswith("/locks"):
            hints["kind"] = Kind.LOCKS.value
        elif target.endswith("/cmdline"):
            # a container's process (its PID 1, mostly), or kube-proxy's command line
            pid = _PROC_PID.match(target)
            if hints.get("scope") == "container" and pid is not None:
                hints["kind"], hints["format"], hints["pid"] = Kind.PROCESSES.value, "cmdline", pid.group(1)
            else:
                hints["kind"] = Kind.KUBE_PROXY_CMDLINE.value
        elif target.endswith("os-release"):
            hints["kind"] = Kind.OS_RELEASE.value
        elif target.endswith("/modules"):
            hints["kind"] = Kind.MODULES.value
        elif target.startswith("/proc/sys/") and len(words) == 2:
            hints["kind"] = Kind.SYSCTL.value
            hints["sysctl"] = target[len("/proc/sys/") :].replace("/", ".")
        elif target.endswith("/stat/nf_conntrack"):
            hints["kind"] = Kind.NF_CONNTRACK_STAT.value
        elif target.endswith("/nf_conntrack"):
            hints["kind"] = Kind.CONNTRACK_ENTRIES.value
    written = sysctl_write(argv)
    if written is not None:  # the value a command wrote (echo V > /proc/sys/..., tee, sysctl -w)
        hints["kind"] = Kind.SYSCTL.value
        hints["sysctl"] = written[0]
        if written[1] is not None:
            hints["value"] = written[1]
    return hints

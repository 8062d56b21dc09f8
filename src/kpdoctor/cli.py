"""The ``kpdoctor`` command line."""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import os
import signal
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.exceptions import Exit
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import kpdoctor.checks  # noqa: F401 - declares every check and log signature (an entry point)
from kpdoctor import deadline
from kpdoctor.about import __version__
from kpdoctor.demo import DEMOS, demo_path
from kpdoctor.diagnose import context_only, exit_code, pipeline
from kpdoctor.knowledge import CHECKS, find
from kpdoctor.model import Severity
from kpdoctor.outfile import write_file
from kpdoctor.report import FORMATS

if TYPE_CHECKING:  # the collector is imported only when a command collects (startup time)
    from kpdoctor.bundle.loader import Evidence
    from kpdoctor.bundle.writer import Bundle
    from kpdoctor.collect.live import LiveOptions

HELP = (
    "Find out why Kubernetes Services are unreachable on a node, with proof.\n\n"
    "Exit codes: 0 nothing found at or above --min-severity; 1 findings; 2 usage error or "
    "nothing usable given; 3 inconclusive (input readable, nothing could be checked, or --timeout "
    "reached before anything was found); 4 internal error (a kpdoctor bug: the rest of the report "
    "is still written)."
)
CONTEXT = {"help_option_names": ["-h", "--help"]}
DEFAULT_COLLECT_TIMEOUT = 90.0  # a node's collection: ~5 s usually; the API of a large cluster can be slow
DEFAULT_RUN_TIMEOUT = 120.0  # a whole diagnosis: collection (3/4 of it, 90 s) plus reading and checks
F = TypeVar("F", bound=Callable[..., Any])


class Format(StrEnum):
    text = "text"
    json = "json"
    markdown = "markdown"
    sarif = "sarif"
    html = "html"


# failing Service ports the HTML report draws chain by chain (traced while the rules are loaded)
TRACED_FOR_HTML = 20


class Level(StrEnum):
    info = "info"
    warning = "warning"
    critical = "critical"


class Hook(StrEnum):
    prerouting = "prerouting"
    output = "output"


# What the running command built, kept until the process ends: freeing a large node's parsed
# rules and results object by object costs a tenth of a second, and main() leaves with os._exit.
# Each command clears what the previous one kept (several run in one process under tests).
_RETAINED: list[object] = []


def _kept() -> list[object]:
    """The list to keep this command's objects in (emptied of the previous command's)."""
    _RETAINED.clear()
    return _RETAINED


def _err(msg: str) -> None:
    from kpdoctor.report.safe import printable

    print(f"kpdoctor: {printable(msg)}", file=sys.stderr)


def _core_notice() -> None:
    """A kpdoctor whose native core does not load still verifies (the Python evaluator walks the
    rules, the same results, slower): said on stderr, with the fix."""
    from kpdoctor.dataplane.iptables.native import core_missing, native_walks

    if native_walks() and (why := core_missing()) is not None:
        _err(f"warning: {why}; the rules are walked by the Python evaluator instead (the same results, slower)")


class _Argument(click.Argument):
    """A positional argument with a help text, listed under "Arguments" (kept apart from
    Click's own ``help``, which only Click 8.5 and later has for arguments)."""

    def __init__(self, *args: Any, doc: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.doc = doc


class _LiveOption(click.Option):
    """An option that only matters with --live (listed under "Live collection")."""


class _Command(click.Command):
    """Help in three parts: arguments, options, and the live-collection options."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        args: list[tuple[str, str]] = []
        opts: list[tuple[str, str]] = []
        live: list[tuple[str, str]] = []
        for p in self.get_params(ctx):
            if isinstance(p, _Argument):
                args.append((p.make_metavar(ctx), p.doc))
            elif (rec := p.get_help_record(ctx)) is not None:
                (live if isinstance(p, _LiveOption) else opts).append(rec)
        for title, rows in (("Arguments", args), ("Options", opts), ("Live collection", live)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class _Group(click.Group):
    """Commands listed in the order they are defined (most used first), not alphabetically."""

    command_class = _Command

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(
    cls=_Group, help=HELP, context_settings=CONTEXT, invoke_without_command=True, subcommand_metavar="COMMAND [ARGS]..."
)
@click.version_option(__version__, "--version", message="kpdoctor %(version)s", help="Print the version and exit.")
@click.pass_context
def app(ctx: click.Context) -> None:
    if ctx.invoked_subcommand is None:  # no command: the overview (a usage error, exit 2)
        click.echo(ctx.get_help())
        raise Exit(2)


def _paths(doc: str) -> Callable[[F], F]:
    return click.argument("paths", cls=_Argument, metavar="[PATH]...", nargs=-1, doc=doc)


_FORMAT = click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice([x.value for x in Format]),
    default=Format.text.value,
    show_default=True,
    help="Output format.",
)

# trace and rules print no Report: the HTML page and SARIF are a report's (diagnose, verify, demo)
_PLAIN_FORMAT = click.option(
    "--format",
    "-f",
    "fmt",
    type=click.Choice([x.value for x in Format if x not in (Format.html, Format.sarif)]),
    default=Format.text.value,
    show_default=True,
    help="Output format.",
)

_OUTPUT = click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write the report to FILE instead of stdout.",
)

_SEVERITY = click.option(
    "--min-severity",
    type=click.Choice([x.value for x in Level]),
    default=None,
    help="Lowest severity to report [default: warning; when nothing reaches it, info findings are listed "
    "one line each, unless the threshold is given].",
)

_VERBOSE = click.option(
    "--verbose", "-v", is_flag=True, help="List every skipped check, input read and evidence line in full."
)

_NODE = click.option(
    "--node",
    metavar="NAME",
    help="The Node being diagnosed (default: bundle manifest, the only Node object, or the hostname).",
)

_SERVICE = click.option(
    "--service",
    metavar="NS/NAME[:PORT]",
    help="A Service: NS/NAME, or NS/NAME:PORT with the port's name or number (80, 53/udp); a bare "
    "NAME when one namespace has it.",
)


def _live(*, flag: bool = True, save: bool = True, once: bool = True) -> Callable[[F], F]:
    """The options of a live collection: ``flag`` adds --live itself, ``save`` --save-bundle;
    ``once``: a single collection (its two counter snapshots, its redaction of addresses: a
    node agent compares its own readings, and keeps what it collects to itself)."""
    opts = [
        click.option(
            "--host-root",
            cls=_LiveOption,
            metavar="DIR",
            help="The node's / is mounted at DIR (a debug Pod: /host); its own binaries run chrooted there.",
        ),
        click.option(
            "--kubeconfig",
            cls=_LiveOption,
            metavar="FILE",
            help="Read the cluster's Services, EndpointSlices, this Node and its Pods with this kubeconfig "
            "(default: $KUBECONFIG, ~/.kube/config, or the Pod's service account).",
        ),
        click.option("--context", cls=_LiveOption, metavar="NAME", help="kubeconfig context."),
        click.option("--no-cluster", cls=_LiveOption, is_flag=True, help="Do not contact the API (node-only)."),
        *[
            click.option(
                "--interval",
                cls=_LiveOption,
                type=float,
                default=5.0,
                show_default=True,
                metavar="SECONDS",
                help="Seconds between the two counter snapshots.",
            )
        ][: 1 if once else 0],
        click.option(
            "--timeout",
            cls=_LiveOption if not flag else click.Option,
            type=float,
            default=DEFAULT_COLLECT_TIMEOUT if not flag else DEFAULT_RUN_TIMEOUT,
            show_default=True,
            metavar="SECONDS",
            help="Bound on the whole collection."
            if not flag
            else "Give up after SECONDS (the whole run: reading, checks, and a --live collection, which gets "
            "three quarters of it); what was done is still reported.",
        ),
        *[
            click.option(
                "--redact-ips",
                cls=_LiveOption,
                is_flag=True,
                help="Replace every IP address with a consistent, prefix-preserving pseudonym.",
            )
        ][: 1 if once else 0],
    ]
    if flag:
        opts.insert(
            0,
            click.option(
                "--live",
                cls=_LiveOption,
                is_flag=True,
                help="Collect from this node now (read-only; needs root) and diagnose that, together with any PATHs.",
            ),
        )
    if save:
        opts.append(
            click.option(
                "--save-bundle",
                cls=_LiveOption,
                type=click.Path(dir_okay=False, path_type=Path),
                metavar="FILE.tar.gz",
                help="Also keep what --live collected as a bundle.",
            )
        )

    def deco(f: F) -> F:
        for o in reversed(opts):
            f = o(f)
        return f

    return deco


class Live:
    """The --live options of one command, and the evidence they produce."""

    def __init__(
        self,
        enabled: bool,
        host_root: str | None = None,
        kubeconfig: str | None = None,
        context: str | None = None,
        no_cluster: bool = False,
        interval: float = 5.0,
        timeout: float = 90.0,
        redact_ips: bool = False,
        save_bundle: Path | None = None,
        node: str | None = None,
    ) -> None:
        self.enabled = enabled
        self.save_bundle = save_bundle
        self._args = (host_root, kubeconfig, context, node, not no_cluster, interval, timeout, redact_ips)

    @classmethod
    def of(cls, options: dict[str, Any], node: str | None, enabled: bool | None = None) -> Live:
        """From a command's live-collection options (``_live``). For a command that also
        diagnoses (``--live``), --timeout bounds the whole run, and the collection gets 3/4 of it."""
        o = options
        return cls(
            o.get("live", False) if enabled is None else enabled,
            o["host_root"],
            o["kubeconfig"],
            o["context"],
            o["no_cluster"],
            o["interval"],
            o["timeout"] * (0.75 if enabled is None else 1.0),
            o["redact_ips"],
            o.get("save_bundle"),
            node,
        )

    @property
    def opts(self) -> LiveOptions:
        from kpdoctor.collect.live import LiveOptions

        return LiveOptions(*self._args)

    def evidence(self, paths: list[str]) -> Evidence:
        """The evidence of ``paths`` plus, with --live, a fresh collection read in memory (exits 2
        if collection cannot start, or when neither is given)."""
        from kpdoctor.bundle.loader import add_collected, load

        if not self.enabled:
            if self.save_bundle is not None:
                _err("--save-bundle only goes with --live")
                raise Exit(2)
            if not paths:
                _err("give the evidence files (PATH...) or --live to collect from this node")
                raise Exit(2)
            return load(paths)
        bundle = _collect(self.opts)
        if self.save_bundle is not None:
            _save(bundle, self.save_bundle)
        return add_collected(load(paths), bundle.artifacts, bundle.skipped, bundle.node, bundle.collected_at)


def _collect(opts: LiveOptions) -> Bundle:
    """Run a live collection with progress on a terminal; exit 2 when it cannot start."""
    from kpdoctor.collect.live import CollectError
    from kpdoctor.collect.live import collect as collect_live

    console = Console(stderr=True, highlight=False)
    try:
        if console.is_terminal:
            with console.status("collecting") as status:
                bundle = collect_live(opts, lambda step: status.update(f"collecting: {escape(step)}"))
        else:
            bundle = collect_live(opts)
    except CollectError as exc:
        _err(str(exc))
        raise Exit(2) from None
    missing = len(bundle.skipped)
    _err(
        f"collected {len(bundle.artifacts)} artifacts in {bundle.duration_ms / 1000:.1f}s"
        + (f"; {missing} not available (listed in the report)" if missing else "")
    )
    return bundle


def _save(bundle: Bundle, dest: Path) -> None:
    from kpdoctor.bundle.writer import write_tar

    name = dest.name
    for suffix in (".tar.gz", ".tgz"):
        name = name.removesuffix(suffix)
    try:
        write_tar(bundle, dest, name or "kpdoctor-bundle")
    except OSError as exc:
        _err(f"cannot write {dest}: {exc.strerror or exc}")
        raise Exit(2) from None
    _err(f"bundle written to {dest}")


def _run(
    paths: list[str],
    fmt: Format,
    output: Path | None,
    min_severity: str | None,
    node: str | None,
    header: str = "",
    live: Live | None = None,
    verbose: bool = False,
) -> int:
    sev = Severity.parse(Level(min_severity or Level.warning.value).value)
    live = live or Live(False)
    keep = _kept()
    try:
        evidence = live.evidence(paths)
        try:
            traced = TRACED_FOR_HTML if fmt == Format.html else 0
            run = pipeline(evidence, node=node, min_severity=sev, trace_failing=traced, free=False)
            keep.append(run)
            report = run.report
        finally:
            evidence.close()
    finally:
        deadline.disarm()
    keep += [report, evidence]
    report.threshold_explicit, report.verbose = min_severity is not None, verbose
    code = exit_code(report)
    if code == 2:
        for p in evidence.problems:
            _err(f"{p.source}: {p.message}")
        _err("nothing usable was given (see `kpdoctor diagnose --help` for what kpdoctor reads)")
        if fmt == Format.json:  # scripts read why from the report itself (input_problems)
            _write(FORMATS[fmt.value], report, output, "")
        return 2
    if _write(FORMATS[fmt.value], report, output, header if fmt == Format.text else ""):
        return 2
    _say_partial(report, evidence, code)
    return code


def _say_partial(report: Any, evidence: Any, code: int) -> None:
    """On stderr, why the exit code is not a plain verdict: a bug met, a --timeout, damaged
    evidence, nothing checked."""
    for e in report.errors:
        _err(f"internal error in {e.stage}: {e.error} (a kpdoctor bug, please report it; the rest stands)")
    if report.timed_out:
        _err(f"partial report: {report.timed_out}")
    elif code == 3 and evidence.damaged:
        _err(f"inconclusive: damaged evidence ({', '.join(sorted(set(evidence.damaged)))}): see 'Inputs not used'")
    elif code == 3 and report.checks_run and context_only(evidence):
        _err(
            "inconclusive: only versions and identity (iptables/kube-proxy --version, uname, os-release, "
            "hostname) were given: add the node's state (kube-proxy's log, iptables-save) to check them against"
        )
    elif code == 3:
        _err("inconclusive: the input was readable but no check could run (see 'Skipped')")


@app.command()
@_paths(
    "Files, bundle folders or .tar.gz bundles: kube-proxy logs, iptables-save output, "
    "kubectl JSON/YAML, pasted terminal sessions...; - reads standard input (a pipe)."
)
@_FORMAT
@_OUTPUT
@_SEVERITY
@_VERBOSE
@_NODE
@_live()
def diagnose(
    paths: tuple[str, ...],
    fmt: str,
    output: Path | None,
    min_severity: str | None,
    verbose: bool,
    node: str | None,
    **live: Any,
) -> None:
    """Diagnose a node from the evidence you have, or from the node itself (--live); root cause first.

    kpdoctor recognises files by content whatever their names: kube-proxy logs (klog, structured, CRI,
    journald, kubectl --timestamps/--prefix, k3s/rke2), iptables-save / -S / -L -n -v output,
    iptables/kube-proxy --version (or kube-proxy's image tag), kube-proxy's /proxyMode answer, uname,
    /etc/os-release, ps, /proc/locks, /proc/modules, the kernel's
    build configuration (/boot/config-*, /proc/config.gz, check-config), kube-proxy's command line or
    KubeProxyConfiguration (or a part of one), Kubernetes objects (JSON/YAML, Lists,
    kubectl cluster-info dump folders), ipvsadm -Ln (--timeout, -Lnc), nft list ruleset (or a block of it), the
    node's counters and settings (conntrack -S, -L or -C, /proc/net/stat/nf_conntrack, sysctl, netstat -s,
    nstat, ss -ltn, ip [-s] [-d] link, ip [-br] addr, ip neigh, arp -n, ip -s ntable, /proc/net/stat/arp_cache,
    /proc/net/softnet_stat, bridge -d link, ethtool -S / -k, dmesg, the CNI configuration;
    two snapshots a few seconds apart show what grows now), other components' logs (kubelet, flannel,
    Calico, kube-router...), kubectl get pods/svc/nodes/endpoints/endpointslices tables, kubectl
    describe svc/node/pod, ifconfig, tcpdump -n captures, arping, Pod-spec fragments, preStop scripts, set -x
    traces of entry scripts, timed `docker stop` / `kubectl delete pod`, runtime stop-timeout lines, ufw
    status, package versions (rpm -q, dpkg -s), hostnamectl, lsof -i, lsmod, counts (`... | grep X |
    wc -l`), curl's and Go programs' connection errors, and terminal transcripts holding any of them;
    also as pasted (markdown quotes or indentation, grep -n prefixes, output written as `# Output:`
    comments, lines without their header, rules or `netstat -s` lines grep'd out, lines a terminal
    broke at one column, several outputs in one paste with or without headings between them, other
    programs' log lines mixed in, notes between the lines, a heredoc, `...` where something was left
    out, a command typed over several lines or run over ssh, terminal colour codes). The report's
    "Inputs read" says how each file, or each part of a paste, was read.

    With --live (as root on the node, or from a privileged Pod with --host-root), kpdoctor first
    collects all of that read-only, plus the cluster's objects when it can reach the API.
    """
    _core_notice()
    lv = Live.of(live, node)
    deadline.arm(live["timeout"])
    raise Exit(_run(list(paths), Format(fmt), output, min_severity, node, live=lv, verbose=verbose))


@app.command()
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path),
    metavar="FILE.tar.gz|DIR",
    help="Where to write the bundle: a .tar.gz, or a new folder (default: ./kpdoctor-NODE-TIME.tar.gz).",
)
@click.option(
    "--node",
    metavar="NAME",
    help="This node's Node name, for the API queries and the manifest (default: the Node the API "
    "knows by this host's name).",
)
@_live(flag=False, save=False)
def collect(output: Path | None, node: str | None, **live: Any) -> None:
    """Collect this node's evidence into a bundle for later or for support (read-only; needs root).

    Rules of every iptables backend and family (iptables-save, never a command that takes the
    xtables lock), IPVS, ipsets and nftables where their kernel parts are already loaded, two
    counter snapshots, sysctls, addresses, routes, links (the VXLAN device's offloads too), the CNI
    configuration in use, /proc/locks, processes, the kernel log,
    kube-proxy's command line, config, version, logs, healthz and metrics, and, through the API,
    Services, EndpointSlices, this Node, its Pods and the kube-proxy DaemonSet and ConfigMap.
    Secrets, tokens and credentials never enter the bundle; --redact-ips hides addresses too.
    """
    lv = Live.of(live, node, enabled=True)
    folder = output is not None and not output.name.endswith((".tar.gz", ".tgz"))
    if output is not None and folder and output.exists() and (not output.is_dir() or any(output.iterdir())):
        _err(f"{output} exists and is not an empty folder: give a new folder or a .tar.gz name")
        raise Exit(2)
    if output is not None and not folder and not output.parent.is_dir():
        _err(f"cannot write {output}: no folder {output.parent}")
        raise Exit(2)
    bundle = _collect(lv.opts)
    if output is None:
        stamp = bundle.collected_at.replace(":", "").replace("-", "").split(".")[0]
        who = "".join(c if c.isalnum() or c in "-." else "_" for c in (bundle.node or bundle.hostname or "node"))
        output = Path(f"kpdoctor-{who}-{stamp}Z.tar.gz")
    if not folder:
        _save(bundle, output)
    else:
        from kpdoctor.bundle.writer import write_dir

        try:
            write_dir(bundle, output)
        except OSError as exc:
            _err(f"cannot write {output}: {exc.strerror or exc}")
            raise Exit(2) from None
        _err(f"bundle written to {output}/")
    raise Exit(0)


@app.command()
@_paths(
    "iptables-save output (both backends, both families), in nftables mode `nft -j list ruleset` (or "
    "`nft list ruleset`) too, plus the cluster's Services and EndpointSlices (kubectl get "
    "svc,endpointslices,nodes -A -o json); bundles work too. kube-proxy's log, config, `ipvsadm -Ln` "
    "or the nftables listing tell the proxy mode."
)
@_SERVICE
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="List Services that verified ok too (on a large node one line per namespace; with -v each).",
)
@_VERBOSE
@_FORMAT
@_OUTPUT
@_NODE
@_live()
def verify(
    paths: tuple[str, ...],
    service: str | None,
    show_all: bool,
    verbose: bool,
    fmt: str,
    output: Path | None,
    node: str | None,
    **live: Any,
) -> None:
    """Check the node's rules against the cluster, Service port by Service port.

    Every Service port and traffic class (pod and node to the ClusterIP, outside clients to the
    NodePort, external IPs and load-balancer IPs, with the Local traffic policies) is sent through
    the node's actual rules as the kernel would, and the backends reached (with their exact
    probabilities) or the drop are compared with the ready endpoints. The rules of the mode
    kube-proxy really runs in are evaluated (iptables; nftables with every table on the node's
    hooks; IPVS through its ipsets and virtual servers); without that mode's state (no `ipvsadm
    -Ln` in IPVS mode, no nft listing in nftables mode) the verification is not evaluated, and
    says why.

    Exit 0: clean (every result ok); 1: a mismatch or stale rules; 3: inconclusive, some results
    uncertain (their notes say why: a match kpdoctor cannot evaluate, a Node it cannot tell, a
    Service object the API server would have refused) and none mismatched, or nothing evaluated (a
    proxy mode kpdoctor does not read yet); 2: nothing usable given, or --service names no Service
    (the closest names are suggested).
    """
    _core_notice()
    from kpdoctor.dataplane.selection import ServiceNotFound, resolve_service
    from kpdoctor.parse.k8s import K8sObject

    def chosen(services: list[K8sObject]) -> str | None:
        """--service as users write it (a port number, a bare name) -> kube-proxy's labels; with
        no Services given, as it is (the "needs Services" message below says what is missing)."""
        if not service or not services:
            return service
        try:
            wanted, notice = resolve_service(services, service)
        except ServiceNotFound as exc:
            _err(str(exc))
            raise Exit(2) from None
        if notice:
            _err(notice)
        return wanted

    sev = Severity.INFO
    lv = Live.of(live, node)
    deadline.arm(live["timeout"])
    keep = _kept()
    try:
        evidence = lv.evidence(list(paths))
        try:
            run = pipeline(
                evidence,
                node=node,
                min_severity=sev,
                command="verify",
                choose_service=chosen,
                trace_failing=TRACED_FOR_HTML if fmt == Format.html else 0,
                free=False,
            )
            keep.append(run)
            report = run.report
        finally:
            evidence.close()
    finally:
        deadline.disarm()
    keep += [report, evidence]
    report.show_all, report.verbose = show_all, verbose
    code = exit_code(report)
    if code == 2:
        for p in report.problems:  # with the objects' own ("the file held no usable object")
            _err(f"{p.source}: {p.message}")
        if evidence.artifacts:
            from kpdoctor.checks.dataplane.common import RULES

            has_rules = any(evidence.of(k) for k in RULES)
            missing = "the cluster's Services" if has_rules else "the node's rules"
            _err(
                "verify needs the node's rules (iptables-save output; `nft -j list ruleset` in nftables mode; "
                "`ipvsadm -Ln` in IPVS mode) and the cluster's Services together (EndpointSlices and the Node "
                f"object too, for a complete check): {missing} were not given"
            )
        else:
            _err("nothing usable was given (see `kpdoctor verify --help`)")
        raise Exit(2)
    ver = report.verification
    if service and ver is not None and not ver.rows and not ver.unverified:
        _err(f"no Service port matches --service {service}")
        raise Exit(2)
    if _write(FORMATS[fmt], report, output):
        raise Exit(2)
    if code == 3 and ver is not None and not report.timed_out and not report.errors:
        unsure = ver.count("uncertain")
        why = [f"{unsure} of {len(ver.rows)} results uncertain (their notes say why)"] if unsure else []
        if ver.unverified:
            why.append(f"{len(ver.unverified)} Service(s) with nothing to verify (see 'Inputs not used')")
        if not ver.evaluated:
            why = [f"verification not evaluated: {ver.reason}"]
        _err("inconclusive: " + "; ".join(why or ["nothing could be verified"]))
    else:
        _say_partial(report, evidence, code)
    raise Exit(code)


def _write(render: object, doc: object, output: Path | None, header: str = "") -> int:
    """Render to stdout or FILE (colour only on a terminal); 2 if it cannot be written (a full
    disk is not a kpdoctor bug). Text that is not UTF-8 (a file name's bytes) is written as U+FFFD."""
    to_file = output is not None
    color = not to_file and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    deadline.stage("writing the report")
    text = header + render(doc, color)  # type: ignore[operator]
    data = text.encode("utf-8", errors="replace")
    try:
        if output is not None:
            write_file(output, data)
        else:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        _quiet_stdout()
    except OSError as exc:
        _err(f"cannot write {output or 'the report to stdout'}: {exc.strerror or exc}")
        if output is None:
            _quiet_stdout()
        return 2
    return 0


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: what is buffered for a closed pipe or a full disk cannot be written
    and must not fail again on exit."""
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


@app.command()
@_paths("iptables-save output, or in nftables mode `nft -j list ruleset` (and, for --service, the cluster's objects).")
@click.option("--to", metavar="IP:PORT[/PROTO]", help="Destination, e.g. 10.96.0.10:53/udp.")
@_SERVICE
@click.option(
    "--from",
    "src",
    metavar="IP",
    help="Source address (default: a pod address, or the node's own address with --hook output).",
)
@click.option(
    "--hook",
    type=click.Choice([x.value for x in Hook]),
    default=Hook.prerouting.value,
    show_default=True,
    help="prerouting: a packet arriving (from a Pod or outside); output: sent by the node itself.",
)
@click.option(
    "--traffic",
    type=click.Choice(["pod", "node", "nodeport", "externalip", "lb", "lb-denied"], case_sensitive=False),
    help="With --service: which of verify's traffic classes to trace, as verify sends it: pod or node "
    "to the ClusterIP (default: pod; node with --hook output), outside clients to the NodePort, an "
    "external IP, the load-balancer IP, or from outside loadBalancerSourceRanges.",
)
@_PLAIN_FORMAT
@_OUTPUT
@_NODE
@_live()
def trace(
    paths: tuple[str, ...],
    to: str | None,
    service: str | None,
    src: str | None,
    hook: str,
    traffic: str | None,
    fmt: str,
    output: Path | None,
    node: str | None,
    **live: Any,
) -> None:
    """Follow one new connection through the rules: every table, chain and rule it takes.

    Branches of `-m statistic` rules (`numgen random` in nftables mode) are listed with their
    exact probabilities; the final DNAT, drop or pass-through is named, with the line of each rule
    in its file (its place in the JSON, for `nft -j` listings).

    --service traces the packet verify sends for that Service port: Pods to the ClusterIP by
    default; --traffic nodeport (externalip, lb, node...) the other classes verify checks, so a
    NodePort that verify reports as a mismatch is traced with --service NS/NAME --traffic nodeport.

    Exit 0: every branch delivered (DNAT to a backend, or passed on); 1: some or all of the
    connections are dropped or rejected (with --service, also: not translated to any backend);
    3: a branch could not be evaluated (uncertain) and none is dropped, or kube-proxy runs in a
    mode whose state was not given (IPVS without `ipvsadm -Ln`); 2: usage error.
    """
    from kpdoctor.dataplane.session import NotEvaluated, open_dataplane
    from kpdoctor.dataplane.trace import TraceError, exit_status, parse_destination, service_target
    from kpdoctor.facts import Facts
    from kpdoctor.report.trace import TRACE_FORMATS

    if (to is None) == (service is None):
        _err("give exactly one of --to IP:PORT[/PROTO] or --service NS/NAME[:PORT]")
        raise Exit(2)
    if traffic and service is None:
        _err("--traffic goes with --service (with --to, give --from and --hook for the packet you mean)")
        raise Exit(2)
    hook_given = click.get_current_context().get_parameter_source("hook") == click.core.ParameterSource.COMMANDLINE
    lv = Live.of(live, node)
    deadline.arm(live["timeout"])
    evidence = lv.evidence(list(paths))
    target = None
    try:
        facts = Facts(evidence, node=node)
        _kept().append(facts)
        dataplane = open_dataplane(facts.dataplane_inputs(), record=True, tracing=True)
        if isinstance(dataplane, NotEvaluated):
            _err(dataplane.reason)
            raise Exit(2 if dataplane.mode == "nftables" else 3)
        running = facts.running_mode
        if running.mode is None and facts.rulesets:
            _err(f"the proxy mode is not known ({running.how}): tracing the iptables rules")
        if not facts.rulesets and (running.mode or "iptables") == "iptables":
            for p in evidence.problems:
                _err(f"{p.source}: {p.message}")
            _err("no iptables rules were given (iptables-save output is what trace follows)")
            raise Exit(2)
        try:
            source = ipaddress.ip_address(src) if src else None
        except ValueError:
            _err(f"--from {src!r} is not an IP address")
            raise Exit(2) from None
        try:
            if to is not None:
                dst, port, proto = parse_destination(to)
            else:
                assert service is not None
                target = service_target(dataplane.services(), service, dataplane.node(), traffic, hook)
                for w in target.warnings:
                    _err(w)
                if traffic and hook_given and hook != target.hook:
                    _err(f"--hook {hook} does not go with --traffic {traffic} (it enters at {target.hook})")
                    raise Exit(2)
                dst, port, proto, hook = target.dst, target.port, target.proto, target.hook
                source = source or target.src
            traces = dataplane.trace(dst, port, proto, source, hook)
        except TraceError as exc:
            _err(str(exc))
            raise Exit(2) from None
    finally:
        evidence.close()
        deadline.disarm()
    if target is not None:
        for t in traces:
            t.service, t.traffic = target.label, target.traffic
            t.notes[:0] = target.notes
            if src is None and target.src_note:
                t.source_note = target.src_note
    if _write(TRACE_FORMATS[fmt], traces, output):
        raise Exit(2)
    raise Exit(exit_status(traces))


@app.command()
@click.argument(
    "key", cls=_Argument, metavar="KEY", doc="A check code (KP101) or a cause slug (iptables-backend-mismatch)."
)
def explain(key: str) -> None:
    """Print the knowledge-base entry of a check or cause."""
    specs = find(key)
    if not specs:
        names = list(CHECKS) + sorted({c.cause for c in CHECKS.values()})
        import difflib

        close = difflib.get_close_matches(key, names, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else " Run `kpdoctor rules` for the list."
        _err(f"no check or cause named {key!r}.{hint}")
        raise Exit(2)
    con = Console(highlight=False, no_color="NO_COLOR" in os.environ or not sys.stdout.isatty(), width=100)
    for spec in specs:
        sec = spec.sections()
        con.print(f"[bold]{spec.code}[/] {escape(spec.cause)} ({spec.severity.label}): {escape(spec.title)}")
        con.print(f"needs any of: {', '.join(k.value for k in spec.needs)}")
        if spec.needs_all:
            con.print(f"together with: {', '.join(k.value for k in spec.needs_all)}")
        con.print()
        con.print(escape(sec.get("Summary", "")))
        for name in ("Symptom", "Cause", "How it is detected", "Fix", "References"):
            if name in sec:
                con.print()
                con.print(f"[bold]{name}[/]")
                for line in sec[name].splitlines():
                    con.print("  " + escape(line))
        if spec.versions:
            con.print()
            con.print("[bold]Versions[/]")
            for row in spec.versions:
                fixed = (
                    f"fixed in {row.fixed}"
                    if row.fixed[:1].isdigit() or row.fixed.startswith("v")
                    else row.fixed or "no fixed release known"
                )
                row_text = f"{row.component} {row.affected}: {fixed} ({row.reference})"
                con.print("  " + escape(row_text))
        con.print()
    raise Exit(0)


@app.command()
@_PLAIN_FORMAT
def rules(fmt: str) -> None:
    """List every check: code, cause, severity and title (-f json adds the evidence each reads)."""
    specs = sorted(CHECKS.values(), key=lambda c: c.code)
    if fmt == Format.json:
        import json

        print(
            json.dumps(
                [
                    {
                        "code": s.code,
                        "cause": s.cause,
                        "severity": s.severity.label,
                        "title": s.title,
                        "needs": [k.value for k in s.needs],
                        "needs_all": [k.value for k in s.needs_all],
                    }
                    for s in specs
                ],
                indent=2,
            )
        )
        raise Exit(0)
    if fmt == Format.markdown:
        print("| code | cause | severity | title |\n|---|---|---|---|")
        for s in specs:
            print(f"| {s.code} | `{s.cause}` | {s.severity.label} | {s.title} |")
        raise Exit(0)
    table = Table("code", "cause", "severity", "title", box=None, pad_edge=False)
    for s in specs:
        table.add_row(s.code, s.cause, s.severity.label, s.title)
    Console(highlight=False, no_color="NO_COLOR" in os.environ, width=140).print(table)
    raise Exit(0)


@app.command()
@click.argument(
    "name",
    cls=_Argument,
    metavar="[NAME]",
    required=False,
    doc="Example to diagnose; omit to list them and run the default one.",
)
@_FORMAT
@_OUTPUT
@_SEVERITY
@_VERBOSE
def demo(name: str | None, fmt: str, output: Path | None, min_severity: str | None, verbose: bool) -> None:
    """Diagnose a built-in example bundle (one per seed scenario)."""
    header = ""
    if not DEMOS:
        _err("no example bundles are installed (the package data is missing: reinstall kpdoctor)")
        raise Exit(2)
    if name is None:
        lines = ["Built-in examples (kpdoctor demo NAME):"]
        for d in DEMOS:
            lines.append(f"  {d.name:<28} {d.description}")
        default = DEMOS[0]
        lines += ["", f"Diagnosing the first one, {default.name}:", "", ""]
        header = "\n".join(lines)
        name = default.name
    if name not in {d.name for d in DEMOS}:
        import difflib

        close = difflib.get_close_matches(name, [d.name for d in DEMOS], n=3)
        _err(
            f"no demo named {name!r}."
            + (f" Did you mean: {', '.join(close)}?" if close else " Run `kpdoctor demo` to list them.")
        )
        raise Exit(2)
    if fmt != Format.text and header:
        header = ""
    raise Exit(_run([str(demo_path(name))], Format(fmt), output, min_severity, None, header=header, verbose=verbose))


@app.command()
@_paths("Evidence files to judge instead of collecting from this node (as `diagnose` reads them).")
@_SEVERITY
@_NODE
@_live(flag=False, save=False)
@click.option(
    "--max-output",
    type=click.IntRange(20, 4096),
    default=80,
    show_default=True,
    help="Longest line printed (NPD's max_output_length).",
)
def npd(paths: tuple[str, ...], min_severity: str | None, node: str | None, max_output: int, **live: Any) -> None:
    """A node-problem-detector custom plugin: one line, exit 0 OK, 1 problem, 2 unknown.

    Without PATHs it collects from this node (read-only, as `diagnose --live`); NPD's
    custom-plugin monitor turns exit 1 into a Node condition or an Event. An example
    configuration is deploy/npd/kpdoctor-plugin-monitor.json.
    """
    from kpdoctor.report.npd import UNKNOWN, clip, npd_status

    lv = Live.of(live, node, enabled=not paths)
    deadline.arm(live["timeout"])
    try:
        evidence = lv.evidence(list(paths))
    except Exit:
        click.echo("kpdoctor: nothing to diagnose (see stderr)")
        raise Exit(UNKNOWN) from None
    try:
        sev = Severity.parse(min_severity or Level.warning.value)
        run = pipeline(evidence, node=node, min_severity=sev, free=False)
        _kept().append(run)
        report = run.report
        code, line = npd_status(report)
    finally:
        deadline.disarm()
        evidence.close()
    click.echo(clip(line, max_output))
    raise Exit(code)


@app.command()
@click.option("--node", metavar="NAME", help="This node's Node name (default: $NODE_NAME, else the node's hostname).")
@_SEVERITY
@_live(flag=False, save=False, once=False)
@click.option(
    "--every",
    "every",
    type=click.FloatRange(min=1.0),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between cycles (each jittered by up to 10%).",
)
@click.option(
    "--full-every",
    type=click.IntRange(min=1),
    default=12,
    show_default=True,
    metavar="N",
    help="Verify every Service again every N cycles; between them, only what changed.",
)
@click.option(
    "--listen",
    multiple=True,
    default=["127.0.0.1:9847"],
    show_default=True,
    metavar="HOST:PORT",
    help="Where /metrics, /healthz and /readyz are served (/run and /report: loopback clients only); "
    "repeat it to serve on several addresses (the DaemonSet: the Pod's IP and 127.0.0.1).",
)
@click.option(
    "--condition-type",
    default="KubeProxyProblem",
    show_default=True,
    metavar="TYPE",
    help="The Node condition set (True while a problem is found).",
)
@click.option("--no-events", is_flag=True, help="Write no Events.")
@click.option("--no-condition", is_flag=True, help="Do not set the Node condition.")
@click.option("--once", is_flag=True, help="Run one cycle, print its summary (JSON) and exit (1: findings).")
def agent(
    node: str | None,
    min_severity: str | None,
    every: float,
    full_every: int,
    listen: tuple[str, ...],
    condition_type: str,
    no_events: bool,
    no_condition: bool,
    once: bool,
    **live: Any,
) -> None:
    """Diagnose this node continuously (a DaemonSet): metrics, Events, a Node condition.

    Every cycle collects the node read-only with the node's own binaries (--host-root),
    verifies only what changed since the last cycle against the cluster (kept current by
    list-and-watch), and reports new and resolved findings as Events on the Node and as the
    Node condition (the agent's only writes). Needs root on the node (or a privileged Pod with
    the node's / at --host-root) and, for the cluster, RBAC to list/watch Services,
    EndpointSlices, Nodes and Pods, create/patch Events and patch nodes/status.
    """
    _core_notice()
    import logging

    from kpdoctor.agent.loop import AgentOptions
    from kpdoctor.agent.service import build, node_name, serve
    from kpdoctor.collect.live import CollectError, LiveOptions, preflight

    gc.enable()  # a long-running process (the one-shot commands keep it off)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    addresses: list[tuple[str, int]] = []
    for where in listen:
        host, _, port = where.rpartition(":")
        if not host or not port.isdigit():
            _err(f"--listen {where}: give HOST:PORT (127.0.0.1:9847)")
            raise Exit(2)
        addresses.append((host.strip("[]"), int(port)))
    try:
        preflight(LiveOptions(host_root=live["host_root"], interval=0.0, timeout=live["timeout"]))
    except CollectError as e:
        _err(str(e))
        raise Exit(2) from None
    name = node_name(node, live["host_root"])
    if not name:
        _err("which node is this? give --node NAME (or set NODE_NAME)")
        raise Exit(2)
    opts = AgentOptions(
        node=name,
        host_root=live["host_root"],
        interval=every,
        full_every=full_every,
        timeout=live["timeout"],
        min_severity=Severity.parse(min_severity or Level.warning.value),
    )
    runner, cache, how = build(
        opts,
        kubeconfig=live["kubeconfig"],
        context=live["context"],
        cluster=not live["no_cluster"],
        events=not no_events,
        condition=not no_condition,
        condition_type=condition_type,
    )
    logging.getLogger("kpdoctor.agent").info("node %s; cluster: %s", name, how)
    try:
        code = serve(runner, cache, addresses, once=once)
    except OSError as e:
        _err(f"--listen {' '.join(listen)}: {e.strerror or e}")
        raise Exit(2) from None
    raise Exit(code)


class Signalled(BaseException):
    """SIGTERM or SIGHUP arrived: the run unwinds (its ``finally`` blocks close the evidence and
    remove temporary folders) and exits 128 + the signal's number. A BaseException, like
    KeyboardInterrupt: the handlers that contain a failing stage must not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


_SIGNALLED: list[int] = []


def _on_signal(signum: int, _frame: object) -> None:
    if _SIGNALLED:  # a second signal while the first unwinds: leave now (temporary folders removed)
        _exit(128 + signum)
    _SIGNALLED.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Signalled(signum)


def _catch_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP become exceptions that unwind the run, so that no temporary folder
    outlives it. A signal the caller ignores (``nohup``) stays ignored; a command that handles
    signals itself (``agent``: SIGTERM/SIGINT stop it after the current cycle) installs its own
    handlers over these. A mask inherited from the parent (a process manager, a test runner that
    held signals while it forked) is lifted for them and for the --timeout's SIGALRM: blocked,
    they would never arrive."""
    caught = {signal.SIGALRM}
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(OSError, ValueError):
            if signal.getsignal(s) in (signal.SIG_DFL, signal.default_int_handler):
                signal.signal(s, _on_signal)
                caught.add(s)
    with contextlib.suppress(OSError, ValueError, AttributeError):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, caught)


def main() -> None:
    """Console entry point."""
    # One command, then exit: the cyclic collector would only re-scan the millions of parsed
    # rules and objects (a second or more at 10,000 Services) to find no garbage.
    gc.disable()
    _catch_signals()
    try:
        app()
    except SystemExit as done:
        _exit(done.code)
    except KeyboardInterrupt:
        _err("interrupted")
        _exit(130)
    except Signalled as sig:
        _err(str(sig))
        _exit(128 + sig.signum)
    except deadline.TimedOut as exc:  # cut short where no stage could report it (collection, rendering)
        _err(str(exc))
        _exit(3)
    except Exception as exc:  # a bug: say so in one line, full trace on request
        if os.environ.get("KPDOCTOR_DEBUG"):
            _remove_tempdirs()
            raise
        _err(
            f"internal error in {deadline.current_stage()}: {type(exc).__name__}: {exc} "
            "(a kpdoctor bug: set KPDOCTOR_DEBUG=1 for the traceback, and please report it)"
        )
        _exit(4)
    _exit(0)


def _exit(code: object) -> None:
    """Leave without tearing down millions of parsed objects one by one (seconds on a node with
    10,000 Services): everything worth keeping is written and flushed first."""
    status = code if isinstance(code, int) else (0 if code is None else 1)
    if isinstance(code, str):
        _err(code)
    _remove_tempdirs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        status = status or 1
    os._exit(status)


def _remove_tempdirs() -> None:
    """Whatever temporary folder the run still has (a stage cut short before closing its evidence)."""
    loader = sys.modules.get("kpdoctor.bundle.loader")  # not imported: none was made
    if loader is not None:
        loader.remove_tempdirs()

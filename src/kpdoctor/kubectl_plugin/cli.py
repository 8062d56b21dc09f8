"""The ``kubectl-kpdoctor`` command (kubectl finds it on PATH as the plugin ``kubectl kpdoctor``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

import kpdoctor.checks  # noqa: F401 - declares every check and log signature (an entry point)
from kpdoctor.about import __version__
from kpdoctor.agent.node_status import DEFAULT_CONDITION
from kpdoctor.kubectl_plugin import cluster as cluster_table
from kpdoctor.kubectl_plugin.kube import ConnectError, api_client, api_error, default_namespace
from kpdoctor.kubectl_plugin.node import (
    DEFAULT_IMAGE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    REPORT_FORMATS,
    NodeDiagnosis,
    NodeRun,
)

F = TypeVar("F", bound=Callable[..., Any])
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _kubectl_flags(f: F) -> F:
    """kubectl's connection flags, accepted before or after the subcommand (kubectl passes them on)."""
    f = click.option("--kubeconfig", metavar="FILE", default=None, help="Path to the kubeconfig file to use.")(f)
    f = click.option("--context", metavar="NAME", default=None, help="The kubeconfig context to use.")(f)
    f = click.option(
        "-n",
        "--namespace",
        metavar="NS",
        default=None,
        help="Namespace of the debug Pod (default: the context's, else default).",
    )(f)
    return f


def _settings(ctx: click.Context, kubeconfig: str | None, context: str | None, namespace: str | None) -> dict[str, Any]:
    """The subcommand's flags, else the ones given before it."""
    parent: dict[str, Any] = ctx.obj or {}
    return {
        "kubeconfig": kubeconfig or parent.get("kubeconfig"),
        "context": context or parent.get("context"),
        "namespace": namespace or parent.get("namespace"),
    }


def _connect(s: dict[str, Any]) -> Any:
    try:
        return api_client(s["kubeconfig"], s["context"])
    except ConnectError as e:
        click.echo(f"kubectl-kpdoctor: {e}", err=True)
        sys.exit(EXIT_USAGE)


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, "--version", message="kubectl-kpdoctor %(version)s")
@_kubectl_flags
@click.pass_context
def main(ctx: click.Context, kubeconfig: str | None, context: str | None, namespace: str | None) -> None:
    """kpdoctor from kubectl: diagnose one node now, or see what the agents found on every node.

    \b
      kubectl kpdoctor node NODE              # a debug Pod on NODE runs `kpdoctor diagnose --live`
      kubectl kpdoctor cluster                # the agents' findings, one table, grouped by cause
    """
    ctx.obj = {"kubeconfig": kubeconfig, "context": context, "namespace": namespace}


@main.command(context_settings=CONTEXT)
@click.argument("node_name", metavar="NODE")
@_kubectl_flags
@click.option(
    "--image",
    default=lambda: os.environ.get("KPDOCTOR_IMAGE") or DEFAULT_IMAGE,
    show_default=f"$KPDOCTOR_IMAGE, else {DEFAULT_IMAGE}",
    help="The kpdoctor image the debug Pod runs.",
)
@click.option(
    "--image-pull-policy",
    type=click.Choice(["Always", "IfNotPresent", "Never"]),
    default="IfNotPresent",
    show_default=True,
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(REPORT_FORMATS),
    default="text",
    show_default=True,
    help="The report's format (kpdoctor diagnose --format; html and sarif too, for a file: `> report.html`).",
)
@click.option(
    "--min-severity",
    type=click.Choice(["info", "warning", "critical"]),
    default=None,
    help="Lowest severity to report (kpdoctor's default: warning).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1.0),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Bound on the whole run: the image pulled, the Pod started, the diagnosis; then the Pod is deleted.",
)
@click.option(
    "--service-account",
    metavar="NAME",
    default=None,
    help="Run the Pod as this service account, so that the diagnosis also reads the cluster (the "
    "DaemonSet's: -n kube-system --service-account kpdoctor). Default: no token, node side only.",
)
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation before creating the privileged Pod.")
@click.pass_context
def node(
    ctx: click.Context,
    node_name: str,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    image: str,
    image_pull_policy: str,
    output: str,
    min_severity: str | None,
    timeout: float,
    service_account: str | None,
    yes: bool,
) -> None:
    """Diagnose NODE now: a short-lived debug Pod on it runs `kpdoctor diagnose --live`.

    The Pod is what `kubectl debug node/NODE --profile=sysadmin` creates (privileged, the node's
    namespaces, its / at /host, here read-only), pinned to NODE. Its report streams here; the Pod is
    deleted when it ends, fails, times out, or on Ctrl-C. Exit code: kpdoctor's (0 nothing found, 1
    found), 2 usage or refused, 3 timed out or the Pod could not start, 130 interrupted.
    """
    s = _settings(ctx, kubeconfig, context, namespace)
    api = _connect(s)
    ns = s["namespace"] or default_namespace(s["kubeconfig"], s["context"])
    run = NodeRun(
        node=node_name,
        namespace=ns,
        image=image,
        timeout=timeout,
        output=output,
        service_account=service_account,
        pull_policy=image_pull_policy,
        min_severity=min_severity,
    )

    def confirm(text: str) -> bool:
        click.echo(text, err=True)
        if yes:
            return True
        try:
            return click.confirm("Create it?", default=False, err=True)
        except click.Abort:
            return False

    try:
        code = NodeDiagnosis(api, run)(confirm)
    except KeyboardInterrupt:  # before any Pod was created (at the node lookup)
        code = EXIT_INTERRUPTED
    sys.exit(code)


@main.command(context_settings=CONTEXT)
@_kubectl_flags
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option(
    "--condition-type",
    default=DEFAULT_CONDITION,
    show_default=True,
    metavar="TYPE",
    help="The Node condition the agents set (their --condition-type).",
)
@click.pass_context
def cluster(
    ctx: click.Context,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    output: str,
    condition_type: str,
) -> None:
    """What the agents found on every node, grouped by cause.

    Reads each Node's condition and the agents' Events on Nodes (kubectl get nodes; kubectl get
    events --field-selector involvedObject.kind=Node,source=kpdoctor): no Pod is created. Exit
    code: 0 no node has a problem, 1 some node has, 2 the API could not be read.
    """
    s = _settings(ctx, kubeconfig, context, namespace)
    api = _connect(s)
    try:
        states = cluster_table.gather(api, condition_type)
    except Exception as e:
        click.echo(f"kubectl-kpdoctor: reading Nodes and Events: {api_error(e)}", err=True)
        sys.exit(EXIT_USAGE)
    if output == "json":
        click.echo(cluster_table.to_json(states, condition_type), nl=False)
    else:
        if not any(st.condition is not None for st in states):
            click.echo(
                f"kubectl-kpdoctor: no Node has the {condition_type} condition: is the agent deployed "
                "(kubectl apply -k deploy/base)?",
                err=True,
            )
        click.echo(cluster_table.table(states), nl=False)
    sys.exit(1 if cluster_table.problems(states) else 0)

"""The cluster connection, chosen as kubectl chooses it: ``--kubeconfig``, else ``$KUBECONFIG`` (a
list of files, merged), else ``~/.kube/config``, else the Pod's service account; ``--context``;
and the namespace from ``-n``, else the context's, else ``default``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class ConnectError(Exception):
    """No usable kubeconfig (the message is one line, without the file's content)."""


def api_client(kubeconfig: str | None, context: str | None) -> Any:
    """A ``kubernetes`` ApiClient, from the same loader the agent uses."""
    from kpdoctor.collect.kubeapi import api_client as load

    try:
        return load(kubeconfig, context)
    except ValueError as e:
        raise ConnectError(str(e)) from None


def _config_source(kubeconfig: str | None) -> str | None:
    if kubeconfig:
        return kubeconfig
    env = os.environ.get("KUBECONFIG", "")
    if any(Path(p).expanduser().is_file() for p in env.split(os.pathsep) if p):
        return env
    default = Path("~/.kube/config").expanduser()
    return str(default) if not env and default.is_file() else None


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the context in use (kubectl's default for ``-n``), else ``default``."""
    source = _config_source(kubeconfig)
    if source is None:
        try:
            return IN_CLUSTER_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
        except OSError:
            return "default"
    from kubernetes import config

    k8s_config: Any = config
    try:
        contexts, active = k8s_config.list_kube_config_contexts(config_file=source)
    except Exception:  # the client will say what is wrong with the file when it loads it
        return "default"
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    ns = ((chosen or {}).get("context") or {}).get("namespace")
    return str(ns) if ns else "default"


def body(resp: Any) -> Any:
    """The JSON of a response read with ``_preload_content=False`` (plain dicts, camelCase keys)."""
    return json.loads(resp.data or b"null")


def api_error(e: Exception) -> str:
    """One line for an API failure: the Status message when there is one (collect.kubeapi.reason)."""
    from kpdoctor.collect.kubeapi import reason

    return reason(e)

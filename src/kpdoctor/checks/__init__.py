"""Checks: one module per failure mode, each registering itself with its knowledge-base entry.

Importing this package registers every check (and every log signature they use).
"""

from kpdoctor.checks.dataplane import (
    backend_split,
    drop_rule,
    endpoints,
    ipvs_empty,
    local_endpoints,
    service_rules,
    vip_node_address,
)
from kpdoctor.checks.node import conntrack, forwarding, ipvs_reuse, mtu, ports, sockets
from kpdoctor.checks.registry import CHECKS, CheckSpec, find, run_all
from kpdoctor.checks.sync import (
    apiserver_stale,
    backend_mismatch,
    config_checks,
    conntrack_sysctl,
    ipset_compat,
    ipvs,
    kernel_features,
    kernel_mark,
    missing_binaries,
    multiple,
    node_ip,
    panics,
    restore_failing,
    rule_generation,
    runtime_panic,
    sync_health,
    xtables_lock,
)
from kpdoctor.checks.termination import shutdown

__all__ = [
    "CHECKS",
    "CheckSpec",
    "apiserver_stale",
    "backend_mismatch",
    "backend_split",
    "config_checks",
    "conntrack",
    "conntrack_sysctl",
    "drop_rule",
    "endpoints",
    "find",
    "forwarding",
    "ipset_compat",
    "ipvs",
    "ipvs_empty",
    "ipvs_reuse",
    "kernel_features",
    "kernel_mark",
    "local_endpoints",
    "missing_binaries",
    "mtu",
    "multiple",
    "node_ip",
    "panics",
    "ports",
    "restore_failing",
    "rule_generation",
    "run_all",
    "runtime_panic",
    "service_rules",
    "shutdown",
    "sockets",
    "sync_health",
    "vip_node_address",
    "xtables_lock",
]

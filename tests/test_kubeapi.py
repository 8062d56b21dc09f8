"""The one reader of the Kubernetes API (collect/kubeapi.py): what every part that reads the API
relies on alike. The denial messages are the API server's own (k8s.io/apiserver's forbidden
message, in the wording of 1.14 and later, as a real 1.20 apiserver of the lab prints it, and the
wording before 1.14)."""

from __future__ import annotations

from typing import Any

import pytest

from kpdoctor.collect.kubeapi import (
    ENDPOINTS_V1,
    SLICES_V1,
    SLICES_V1BETA1,
    ListNeverEnds,
    missing_permission,
    pages,
    served_endpoints,
)

SA = "system:serviceaccount:default:no-rights"


@pytest.mark.parametrize(
    ("message", "want"),
    [
        (
            f'services is forbidden: User "{SA}" cannot list resource "services" in API group "" at the cluster scope',
            f'RBAC: {SA} needs a ClusterRole (and a ClusterRoleBinding) with the rule apiGroups: [""], '
            "resources: [services], verbs: [list]",
        ),
        (
            f'endpointslices.discovery.k8s.io is forbidden: User "{SA}" cannot watch resource "endpointslices" in '
            'API group "discovery.k8s.io" at the cluster scope',
            f'RBAC: {SA} needs a ClusterRole (and a ClusterRoleBinding) with the rule apiGroups: ["discovery.k8s.io"], '
            "resources: [endpointslices], verbs: [watch]",
        ),
        (
            f'pods "kube-proxy-x7k2p" is forbidden: User "{SA}" cannot get resource "pods/log" in API group "" in '
            'the namespace "kube-system"',
            f'RBAC: {SA} needs a Role in namespace kube-system (and a RoleBinding) with the rule apiGroups: [""], '
            "resources: [pods/log], verbs: [get]",
        ),
        (  # before 1.14
            f'nodes is forbidden: User "{SA}" cannot list nodes at the cluster scope',
            f'RBAC: {SA} needs a ClusterRole (and a ClusterRoleBinding) with the rule apiGroups: [""], '
            "resources: [nodes], verbs: [list]",
        ),
        (
            f'daemonsets.apps is forbidden: User "{SA}" cannot list daemonsets.apps at the cluster scope',
            f'RBAC: {SA} needs a ClusterRole (and a ClusterRoleBinding) with the rule apiGroups: ["apps"], '
            "resources: [daemonsets], verbs: [list]",
        ),
    ],
)
def test_a_denial_is_said_as_the_rule_that_grants_it(message: str, want: str) -> None:
    assert missing_permission(message) == want


def test_other_forbidden_messages_are_left_as_they_are() -> None:
    assert missing_permission("admission webhook denied the request") is None


def test_the_endpoints_source_follows_what_the_server_serves() -> None:
    def group(*versions: str) -> dict[str, Any]:
        return {
            "kind": "APIGroup",
            "versions": [{"groupVersion": f"discovery.k8s.io/{v}", "version": v} for v in versions],
        }

    assert served_endpoints(group("v1", "v1beta1")) is SLICES_V1  # 1.21-1.24
    assert served_endpoints(group("v1")) is SLICES_V1  # 1.25+
    assert served_endpoints(group("v1beta1")) is SLICES_V1BETA1  # 1.17-1.20
    assert served_endpoints(None) is ENDPOINTS_V1  # 404: older than the group
    assert served_endpoints(group()) is ENDPOINTS_V1


def test_pages_follow_continue_until_the_list_ends() -> None:
    bodies = {None: {"items": [1], "metadata": {"continue": "a"}}, "a": {"items": [2], "metadata": {"continue": "b"}},
              "b": {"items": [3], "metadata": {}}}  # fmt: skip
    asked: list[str | None] = []

    def page(token: str | None) -> dict[str, Any]:
        asked.append(token)
        return bodies[token]

    assert [b["items"] for b in pages(page, 10)] == [[1], [2], [3]]
    assert asked == [None, "a", "b"]


def test_a_list_that_does_not_end_is_given_up() -> None:
    with pytest.raises(ListNeverEnds, match="same continue token twice"):
        list(pages(lambda token: {"items": [], "metadata": {"continue": "same"}}, 10))
    counter = iter(range(100))
    with pytest.raises(ListNeverEnds, match="did not end after 5 pages"):
        list(pages(lambda token: {"metadata": {"continue": str(next(counter))}}, 5))

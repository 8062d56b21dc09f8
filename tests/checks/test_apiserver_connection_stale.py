"""KP105 apiserver-connection-stale: stream errors on the apiserver connection, and the v0.x watch
channels stuck on a history etcd has cleared."""

from __future__ import annotations

from checks.helpers import Diag
from conftest import none_of, one

from kpdoctor.model import Confidence


def test_apiserver_stream_error_upstream_and_tke(diagnose: Diag) -> None:
    line = (
        "E0712 10:11:12.000000       1 reflector.go:178] k8s.io/client-go/informers/factory.go:135: Failed to list *core.Endpoints: "
        "Stream error http2.StreamError{StreamID:0xea1, Code:0x2, Cause:error(nil)} when reading response body, "
        "may be caused by closed connection. Please retry.\n"
    )
    r = diagnose({"kp.log": "I0712 10:00:00.000000 1 server.go:548] Version: v1.18.4-tke.20\n" + line * 3})
    f = r.visible()[0]
    assert f.cause == "apiserver-connection-stale" and f.fixed_in == ["v1.18.4-tke.26"]
    r2 = diagnose({"kp.log": "I0712 10:00:00.000000 1 server.go:548] Version: v1.19.2\n" + line * 3})
    assert r2.visible()[0].fixed_in == ["v1.19.5"]


# k8s-3216 (kubernetes#3216), indented as posted.
WATCH_3216 = (
    "    W0105 17:28:25.587865    5051 api.go:188] Got error status on WatchEndpoints channel: &{TypeMeta:{Kind: "
    "APIVersion:} ListMeta:{SelfLink:/api/v1beta1/endpoints ResourceVersion:} Status:Failure Message:401: The event "
    "in requested index is outdated and cleared (the requested history has been cleared [578/235]) [1577] Reason: "
    "Details:<nil> Code:0}\n"
)


def test_old_watch_channels_stuck_on_a_cleared_history(diagnose: Diag) -> None:
    f = one(diagnose({"kube-proxy.log": WATCH_3216}), "KP105")
    assert f.confidence == Confidence.HIGH and "Endpoints" in f.summary and "before 1.0" in f.summary
    assert any("3410" in x for x in f.fix)
    # Modern client-go relists on an expired version: benign.
    modern = (
        "W0105 17:28:25.587865       1 reflector.go:441] k8s.io/client-go/informers/factory.go:134: watch of "
        "*v1.EndpointSlice ended with: too old resource version: 1577 (1580)\n"
        'I0105 17:28:26.100000       1 proxier.go:832] "SyncProxyRules complete" elapsed="75ms"\n'
    )
    none_of(diagnose({"kube-proxy.log": modern}), "KP105")

"""Version comparison follows DESIGN.md: upstream first, vendor build only within a vendor."""

from kpdoctor.versions import FixRow, IptablesVersion, KernelVersion, KubeVersion, remedy


def v(s: str) -> KubeVersion:
    out = KubeVersion.parse(s)
    assert out is not None
    return out


def test_vendor_builds_compare_within_vendor() -> None:
    assert v("v1.18.4-tke.35").at_least(v("v1.18.4-tke.26")) is True
    assert v("v1.18.4-tke.30").at_least(v("v1.18.4-tke.35")) is False
    # a generic semver would rank a vendor build below upstream as a pre-release: we must not
    assert v("v1.18.4-tke.35").at_least(v("v1.18.4")) is True
    # an upstream build may lack the vendor's backport: unknown
    assert v("v1.18.4").at_least(v("v1.18.4-tke.26")) is None
    assert v("v1.19.0").at_least(v("v1.18.4-tke.26")) is None


def test_vendor_suffixes_parse() -> None:
    assert (v("v1.24.4-tke.5").vendor, v("v1.24.4-tke.5").build) == ("tke", 5)
    assert v("v1.27.3-eksbuild.2").vendor == "eks"
    assert v("v1.29.1-gke.1589018").build == 1589018
    assert (v("v1.30.2+k3s1").vendor, v("v1.30.2+rke2r1").vendor) == ("k3s", "rke2")
    assert v("Kubernetes v1.13.0").upstream == (1, 13, 0)
    assert KubeVersion.parse("no version here") is None


def test_remedy_picks_the_vendor_row_of_the_line() -> None:
    rows = [FixRow((1, 18), "v1.18.4-tke.35", vendor="tke"), FixRow((1, 16), "v1.16.3-tke.34", vendor="tke")]
    r = remedy(v("v1.18.4-tke.30"), rows)
    assert r.affected is True and r.fixed_in == ["v1.18.4-tke.35"]
    assert "v1.18.4-tke.35" in r.advice
    assert remedy(v("v1.18.4-tke.40"), rows).affected is False
    assert remedy(None, rows).affected is None


def test_iptables_and_kernel_versions() -> None:
    ipt = IptablesVersion.parse("iptables v1.8.4 (legacy)")
    assert ipt and ipt.short_backend == "legacy" and ipt.at_least(1, 6, 2)
    old = IptablesVersion.parse("iptables v1.4.21")
    assert old and not old.at_least(1, 6, 2) and old.backend is None
    k = KernelVersion.parse("5.15.0-127-generic")
    assert k and k.base == (5, 15, 0) and k.abi == 127 and k.distro == "ubuntu"
    k2 = KernelVersion.parse("6.6.58")
    assert k2 and k2.abi is None

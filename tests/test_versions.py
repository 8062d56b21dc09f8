"""Version comparison follows DESIGN.md: upstream first, vendor build only within a vendor."""

import pytest

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
    assert ipt and ipt.short_variant == "legacy" and ipt.at_least(1, 6, 2)
    old = IptablesVersion.parse("iptables v1.4.21")
    assert old and not old.at_least(1, 6, 2) and old.variant is None
    k = KernelVersion.parse("5.15.0-127-generic")
    assert k and k.base == (5, 15, 0) and k.abi == 127 and k.distro == "ubuntu"
    k2 = KernelVersion.parse("6.6.58")
    assert k2 and k2.abi is None


@pytest.mark.parametrize(
    ("release", "base", "abi", "flavour", "distro", "upstream"),
    [
        ("5.15.0-127-generic", (5, 15, 0), 127, "generic", "ubuntu", None),
        ("6.8.0-1025-aws", (6, 8, 0), 1025, "aws", "ubuntu", None),
        ("5.15.0-1075-azure", (5, 15, 0), 1075, "azure", "ubuntu", None),
        ("6.8.0-1019-gcp", (6, 8, 0), 1019, "gcp", "ubuntu", None),
        ("6.1.0-18-amd64", (6, 1, 0), 18, "amd64", "debian", None),
        ("6.1.0-18-cloud-amd64", (6, 1, 0), 18, "cloud-amd64", "debian", None),
        ("6.1.76-1+deb12u1", (6, 1, 76), None, None, "debian", (6, 1, 76)),
        ("4.18.0-513.5.1.el8_9.x86_64", (4, 18, 0), None, None, "rhel", None),
        ("3.10.0-1062.9.1.el7.x86_64", (3, 10, 0), None, None, "rhel", None),
        ("6.11.4-301.fc41.x86_64", (6, 11, 4), None, None, "fedora", (6, 11, 4)),
        ("6.6.57-1-lts", (6, 6, 57), None, "lts", "arch", (6, 6, 57)),
        ("6.11.6-arch1-1", (6, 11, 6), None, None, "arch", (6, 11, 6)),
        ("5.10.192-183.736.amzn2.x86_64", (5, 10, 192), None, None, "amazon", (5, 10, 192)),
        ("5.14.21-150500.55.83-default", (5, 14, 21), None, "default", "suse", None),
        ("6.6.58", (6, 6, 58), None, None, "upstream", (6, 6, 58)),
    ],
)
def test_distribution_kernel_releases(
    release: str,
    base: tuple[int, int, int],
    abi: int | None,
    flavour: str | None,
    distro: str,
    upstream: tuple[int, int, int] | None,
) -> None:
    """A numeric suffix is an ABI only in Ubuntu's and Debian's scheme; elsewhere it is a package
    release, and the base is the upstream release the package is built from."""
    k = KernelVersion.parse(release)
    assert k is not None and str(k) == release
    assert (k.base, k.abi, k.flavour, k.distro, k.upstream) == (base, abi, flavour, distro, upstream)


def test_kernel_release_package_and_distribution_versions() -> None:
    rhel = KernelVersion.parse("4.18.0-513.5.1.el8_9.x86_64")
    assert rhel is not None and (rhel.release, rhel.distro_version) == ("513.5.1", "8.9")
    fedora = KernelVersion.parse("Linux host 6.11.4-301.fc41.x86_64 #1 SMP PREEMPT_DYNAMIC")
    assert fedora is not None and (fedora.release, fedora.distro_version) == ("301", "41")
    amazon = KernelVersion.parse("6.1.112-124.190.amzn2023.x86_64")
    assert amazon is not None and amazon.distro_version == "2023"
    aws = KernelVersion.parse("6.8.0-1025-aws")
    main = KernelVersion.parse("6.8.0-57-generic-64k")
    assert aws is not None and main is not None and (aws.ubuntu_line, main.ubuntu_line) == ("aws", "generic")


def test_an_unknown_version_is_not_told_another_vendors_fix() -> None:
    """KP101's table holds TKE builds and upstream notes: a kube-proxy of unknown origin is not
    "fixed in v1.18.4-tke.35"; the advice names each vendor's builds as that vendor's."""
    mixed = [
        FixRow((1, 18), "v1.18.4-tke.35", vendor="tke"),
        FixRow((1, 17), status="no-fix", below=True, note="images before 1.17 are legacy-only"),
    ]
    r = remedy(None, mixed)
    assert r.affected is None and r.fixed_in == []
    assert "TKE v1.18.4-tke.35" in r.advice and "upstream: images before 1.17 are legacy-only" in r.advice
    tke_only = [FixRow((1, 18), "v1.18.4-tke.26", vendor="tke")]  # a bug of TKE's builds only
    assert remedy(None, tke_only).fixed_in == ["v1.18.4-tke.26"]

#!/usr/bin/env bash
# Build kpdoctor's image as a root filesystem tarball with mmdebstrap: no daemon, no registry, no
# Dockerfile interpreter (docs/deploy.md, "The image"). Needs root (or unprivileged user
# namespaces), Debian's archive and PyPI (the wheels of kpdoctor's dependencies).
#
#   sudo deploy/image/build-rootfs.sh [OUT.tar] [SUITE]       # default: kpdoctor-rootfs.tar, bookworm
#
# Then make it an image where it is needed, for example:
#   podman import --change 'ENTRYPOINT ["/opt/kpdoctor/bin/kpdoctor"]' kpdoctor-rootfs.tar kpdoctor:0.1.0
#   docker import --change 'ENTRYPOINT ["/opt/kpdoctor/bin/kpdoctor"]' kpdoctor-rootfs.tar kpdoctor:0.1.0
# and onto a node without a registry: `podman save kpdoctor:0.1.0 | ctr -n k8s.io images import -`
# (containerd), or `kind load image-archive`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$(realpath -m "${1:-kpdoctor-rootfs.tar}")
suite=${2:-bookworm}
python=${PYTHON:-python3}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# kpdoctor and its dependencies as wheels, built here: the root filesystem installs them offline.
# The wheels must match the suite's Python (bookworm: 3.11) and this machine's architecture;
# kpdoctor's own wheel holds its native core, built by cargo (needed here; its wheel is abi3, so
# any CPython from 3.11 on loads it, and it needs a glibc no newer than this machine's).
"$python" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$work/wheels" "$repo"

# No iptables, nftables, ipvsadm, ipset or conntrack: kpdoctor uses the node's own.
mmdebstrap --variant=minbase --include=python3,python3-venv,util-linux,ca-certificates \
  --customize-hook="mkdir -p \"\$1/tmp/wheels\" && cp $work/wheels/*.whl \"\$1/tmp/wheels/\"" \
  --customize-hook='chroot "$1" python3 -m venv /opt/kpdoctor' \
  --customize-hook='chroot "$1" /opt/kpdoctor/bin/pip install --quiet --no-index --find-links /tmp/wheels --disable-pip-version-check kpdoctor' \
  --customize-hook='rm -rf "$1/tmp/wheels" "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
  --customize-hook='chroot "$1" /opt/kpdoctor/bin/kpdoctor --version' \
  "$suite" "$out"
echo "$out"

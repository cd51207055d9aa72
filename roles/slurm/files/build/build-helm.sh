#!/usr/bin/env bash
# Build the helm CLI (needed by kubernetes.core.helm for slurm_backend=slinky) from the Go
# module proxy into <cache>/bin/helm. Opt-in: the lab backend does not need it.
#
# Usage: build-helm.sh
#
# The version is the one pinned in helm/go.mod next to this script (with its go.sum). A stamp
# file holds a digest of those files, the Go version and the build flags, so a rerun with nothing
# changed builds nothing.
#
# The last line of output is machine-readable for the role:
#   gpufleet-build: changed helm      helm was built
#   gpufleet-build: unchanged         helm was already up to date
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_dir="${GPUFLEET_CACHE_DIR:-$HOME/.cache/gpufleet}"
bin_dir="${cache_dir}/bin"
stamp_file="${bin_dir}/.stamps/helm"

# Share the module and build caches with the kubernetes role's builds; no toolchain download
# is possible offline, so the machine's Go is used as is.
export GOMODCACHE="${cache_dir}/go/mod"
export GOCACHE="${cache_dir}/go/build"
export GOTOOLCHAIN=local
export GOFLAGS="-trimpath -mod=readonly"

version="$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 } $1 == "helm.sh/helm/v3" && $2 ~ /^v/ { print $2 }' \
  "${here}/helm/go.mod" | head -n1)"
# A module build reports the branch default ("v3.19") unless the full version is stamped in;
# kubernetes.core.helm compares it against feature minimums.
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=${version} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"

want="$({
  go env GOVERSION
  echo "${ldflags}"
  grep -v '^[[:space:]]*//' "${here}/helm/go.mod"
  cat "${here}/helm/go.sum"
} | sha256sum | cut -d' ' -f1)"

command -v go >/dev/null || { echo "go is not installed (need Go >= 1.26)" >&2; exit 3; }
mkdir -p "${bin_dir}/.stamps"

if [[ -x "${bin_dir}/helm" && -f "${stamp_file}" && "$(cat "${stamp_file}")" == "${want}" ]]; then
  echo "helm ${version} is up to date"
  echo "gpufleet-build: unchanged"
  exit 0
fi

echo "building helm ${version} (first build takes about 4 min on 2 cores)..."
start=$SECONDS
(cd "${here}/helm" && CGO_ENABLED=0 go build -ldflags="${ldflags}" -o "${bin_dir}/.helm.tmp" helm.sh/helm/v3/cmd/helm)
mv -f "${bin_dir}/.helm.tmp" "${bin_dir}/helm"
echo "${want}" > "${stamp_file}"
echo "built helm in $((SECONDS - start)) s ($(du -h "${bin_dir}/helm" | cut -f1))"
echo "gpufleet-build: changed helm"

#!/usr/bin/env bash
# Build the lab's control-plane binaries from Go modules into a cache directory.
#
# Usage: build-lab-binaries.sh [BINARY ...]
#   BINARY: kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok
#           (default: all of them)
#
# The versions are the ones pinned in the wrapper modules next to this script
# (kubernetes/go.mod, etcd/go.mod, kwok/go.mod, with their go.sum). Each binary gets a stamp
# file holding a digest of its module files, the Go version and the build flags, so a rerun
# with nothing changed builds nothing and returns in well under a second.
#
# The last line of output is machine-readable for the role:
#   gpufleet-build: changed <names>     something was built
#   gpufleet-build: unchanged           everything was already up to date
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_dir="${GPUFLEET_CACHE_DIR:-$HOME/.cache/gpufleet}"
bin_dir="${cache_dir}/bin"
stamp_dir="${bin_dir}/.stamps"

# Keep the module and build caches next to the binaries so a rebuild (new version, cleaned
# bin/) reuses what was downloaded and compiled before. The machine's Go must be used as is:
# no toolchain download is possible offline.
export GOMODCACHE="${cache_dir}/go/mod"
export GOCACHE="${cache_dir}/go/build"
export GOTOOLCHAIN=local
export GOFLAGS="-trimpath -mod=readonly"

# module directory, Go package and rough cold build time (2 cores) of each binary.
declare -A module=(
  [kube-apiserver]=kubernetes [kube-controller-manager]=kubernetes
  [kube-scheduler]=kubernetes [kubectl]=kubernetes [etcd]=etcd [kwok]=kwok
)
declare -A package=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [etcd]=go.etcd.io/etcd/server/v3
  [kwok]=sigs.k8s.io/kwok/cmd/kwok
)
declare -A cold_minutes=(
  [kube-apiserver]=5 [kube-controller-manager]=2 [kube-scheduler]=1 [kubectl]=1
  [etcd]=1 [kwok]=3
)
all_binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok)

# The pinned version of a module, read from its wrapper go.mod (single source of truth).
pinned_version() {
  local mod_dir="$1" mod_path="$2"
  awk -v m="$mod_path" '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2 }' \
    "${here}/${mod_dir}/go.mod" | head -n1
}

kubernetes_version="$(pinned_version kubernetes k8s.io/kubernetes)"
etcd_version="$(pinned_version etcd go.etcd.io/etcd/server/v3)"
kwok_version="$(pinned_version kwok sigs.k8s.io/kwok)"

version_of() {
  case "${module[$1]}" in
    kubernetes) echo "${kubernetes_version}" ;;
    etcd) echo "${etcd_version}" ;;
    kwok) echo "${kwok_version}" ;;
  esac
}

# A module build of k8s.io/kubernetes reports v0.0.0-master unless the version is stamped in;
# clients (and Slinky's >= 1.29 check) read gitVersion from /version.
ldflags_of() {
  local flags="-s -w"
  if [[ "${module[$1]}" == kubernetes ]]; then
    local v="${kubernetes_version}" major minor
    major="${v#v}"; major="${major%%.*}"
    minor="${v#v*.}"; minor="${minor%%.*}"
    local pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      flags+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=${major}"
      flags+=" -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
    done
  elif [[ "$1" == kwok ]]; then
    flags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${kwok_version}"
  fi
  echo "${flags}"
}

stamp_of() {
  local name="$1" dir="${here}/${module[$1]}"
  {
    echo "${package[$name]}"
    go env GOVERSION
    ldflags_of "${name}"
    # Comments in go.mod do not change what gets built.
    grep -v '^[[:space:]]*//' "${dir}/go.mod"
    cat "${dir}/go.sum"
  } | sha256sum | cut -d' ' -f1
}

requested=("$@")
if [[ ${#requested[@]} -eq 0 ]]; then
  requested=("${all_binaries[@]}")
fi
for name in "${requested[@]}"; do
  if [[ -z "${package[$name]:-}" ]]; then
    echo "unknown binary '${name}'; expected one of: ${all_binaries[*]}" >&2
    exit 2
  fi
done

command -v go >/dev/null || { echo "go is not installed (need Go >= 1.26)" >&2; exit 3; }
mkdir -p "${bin_dir}" "${stamp_dir}"

built=()
for name in "${requested[@]}"; do
  want="$(stamp_of "${name}")"
  if [[ -x "${bin_dir}/${name}" && -f "${stamp_dir}/${name}" ]] \
     && [[ "$(cat "${stamp_dir}/${name}")" == "${want}" ]]; then
    echo "${name} $(version_of "${name}") is up to date"
    continue
  fi
  echo "building ${name} $(version_of "${name}") (first build takes about ${cold_minutes[$name]} min on 2 cores)..."
  start=$SECONDS
  # Pure Go builds: no C toolchain needed, and the binaries run on any Linux of the same arch.
  (cd "${here}/${module[$name]}" && CGO_ENABLED=0 go build \
     -ldflags="$(ldflags_of "${name}")" -o "${bin_dir}/.${name}.tmp" "${package[$name]}")
  mv -f "${bin_dir}/.${name}.tmp" "${bin_dir}/${name}"
  echo "${want}" > "${stamp_dir}/${name}"
  echo "built ${name} in $((SECONDS - start)) s ($(du -h "${bin_dir}/${name}" | cut -f1))"
  built+=("${name}")
done

if [[ ${#built[@]} -gt 0 ]]; then
  echo "gpufleet-build: changed ${built[*]}"
else
  echo "gpufleet-build: unchanged"
fi

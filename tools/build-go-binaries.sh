#!/usr/bin/env bash
# Build Go binaries from pinned wrapper modules into a cache directory: the lab's control plane
# (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok) and helm (which
# kubernetes.core.helm drives for slurm_backend=slinky).
#
# Usage: tools/build-go-binaries.sh BINARY [BINARY ...]
#        tools/build-go-binaries.sh --list
#   BINARY: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm
#
# Environment: GPUFLEET_CACHE_DIR (default ~/.cache/gpufleet). Binaries go to <cache>/bin, the Go
# module and build caches to <cache>/go.
#
# The versions are the ones pinned in the wrapper modules under tools/go-builds/ (kubernetes,
# etcd, kwok, helm: a go.mod and its go.sum each). Each binary gets a stamp file
# (<cache>/bin/.stamps/<name>) holding a digest of its package, the Go version, the build flags
# and its module files, so a rerun with nothing changed builds nothing and returns in well under
# a second. Two runs at once wait for each other per binary (flock) instead of building twice.
#
# The last line of output is machine-readable for the roles:
#   gpufleet-build: changed <names>     something was built
#   gpufleet-build: unchanged           everything was already up to date
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
modules_dir="${here}/go-builds"
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

all_binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm)
# Wrapper module directory, Go package and rough cold build time (2 cores) of each binary.
declare -A module=(
  [kube-apiserver]=kubernetes [kube-controller-manager]=kubernetes
  [kube-scheduler]=kubernetes [kubectl]=kubernetes [etcd]=etcd [kwok]=kwok [helm]=helm
)
declare -A package=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [etcd]=go.etcd.io/etcd/server/v3
  [kwok]=sigs.k8s.io/kwok/cmd/kwok
  [helm]=helm.sh/helm/v3/cmd/helm
)
# The module whose pinned version names the binary's version.
declare -A versioned_module=(
  [kubernetes]=k8s.io/kubernetes [etcd]=go.etcd.io/etcd/server/v3 [kwok]=sigs.k8s.io/kwok
  [helm]=helm.sh/helm/v3
)
declare -A cold_minutes=(
  [kube-apiserver]=5 [kube-controller-manager]=2 [kube-scheduler]=1 [kubectl]=1
  [etcd]=1 [kwok]=3 [helm]=4
)

if [[ "${1:-}" == --list ]]; then
  echo "${all_binaries[*]}"
  exit 0
fi
if [[ $# -eq 0 ]]; then
  echo "usage: $0 BINARY [BINARY ...]   (one or more of: ${all_binaries[*]})" >&2
  exit 2
fi
for name in "$@"; do
  if [[ -z "${package[$name]:-}" ]]; then
    echo "unknown binary '${name}'; expected one of: ${all_binaries[*]}" >&2
    exit 2
  fi
done

# The pinned version of a module, read from its wrapper go.mod (single source of truth).
version_of() {
  local dir="${module[$1]}"
  awk -v m="${versioned_module[$dir]}" \
    '$1 == "require" && $2 == m { print $3 } $1 == m && $2 ~ /^v/ { print $2 }' \
    "${modules_dir}/${dir}/go.mod" | head -n1
}

# Module builds report a placeholder version unless it is stamped in: k8s.io/kubernetes says
# v0.0.0-master (clients, and Slinky's >= 1.29 check, read gitVersion from /version), helm says
# its branch ("v3.19"), which kubernetes.core.helm compares against feature minimums.
ldflags_of() {
  local name="$1" flags="-s -w" v
  v="$(version_of "${name}")"
  case "${module[$name]}" in
    kubernetes)
      local major minor pkg
      major="${v#v}"; major="${major%%.*}"
      minor="${v#v*.}"; minor="${minor%%.*}"
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X ${pkg}.gitVersion=${v} -X ${pkg}.gitMajor=${major}"
        flags+=" -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
      done
      ;;
    kwok)
      flags+=" -X sigs.k8s.io/kwok/pkg/consts.Version=${v}"
      ;;
    helm)
      flags+=" -X helm.sh/helm/v3/internal/version.version=${v}"
      flags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      ;;
  esac
  echo "${flags}"
}

stamp_of() {
  local name="$1" dir="${modules_dir}/${module[$1]}"
  {
    echo "${package[$name]}"
    go env GOVERSION
    ldflags_of "${name}"
    # Comments in go.mod do not change what gets built.
    grep -v '^[[:space:]]*//' "${dir}/go.mod"
    cat "${dir}/go.sum"
  } | sha256sum | cut -d' ' -f1
}

up_to_date() {
  [[ -x "${bin_dir}/$1" && -f "${stamp_dir}/$1" ]] && [[ "$(cat "${stamp_dir}/$1")" == "$2" ]]
}

command -v go >/dev/null || { echo "go is not installed (need Go >= 1.26)" >&2; exit 3; }
mkdir -p "${bin_dir}" "${stamp_dir}"

built=()
for name in "$@"; do
  want="$(stamp_of "${name}")"
  version="$(version_of "${name}")"
  if up_to_date "${name}" "${want}"; then
    echo "${name} ${version} is up to date"
    continue
  fi
  # One builder per binary: a second run waits here, then finds it up to date.
  exec {lock}>"${stamp_dir}/.${name}.lock"
  flock "${lock}"
  if up_to_date "${name}" "${want}"; then
    echo "${name} ${version} is up to date (built by another run)"
    exec {lock}>&-
    continue
  fi
  echo "building ${name} ${version} (first build takes about ${cold_minutes[$name]} min on 2 cores)..."
  start=$SECONDS
  # Pure Go builds: no C toolchain needed, and the binaries run on any Linux of the same arch.
  (cd "${modules_dir}/${module[$name]}" && CGO_ENABLED=0 go build \
     -ldflags="$(ldflags_of "${name}")" -o "${bin_dir}/.${name}.tmp" "${package[$name]}")
  mv -f "${bin_dir}/.${name}.tmp" "${bin_dir}/${name}"
  echo "${want}" > "${stamp_dir}/${name}"
  exec {lock}>&-
  echo "built ${name} in $((SECONDS - start)) s ($(du -h "${bin_dir}/${name}" | cut -f1))"
  built+=("${name}")
done

if [[ ${#built[@]} -gt 0 ]]; then
  echo "gpufleet-build: changed ${built[*]}"
else
  echo "gpufleet-build: unchanged"
fi

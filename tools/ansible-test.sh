#!/usr/bin/env bash
# Run ansible-test (sanity or units) offline:
# - ansible-test resolves symlinks, so it runs on a copy of the tracked tree at a
#   real .../ansible_collections/gpufleet/resilience path;
# - its venvs download a get-pip script from the internet, which fails here, so a
#   stand-in in ~/.ansible/test/cache bootstraps pip with ensurepip instead.
# Usage: tools/ansible-test.sh sanity|units [extra ansible-test args]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
command=${1:?usage: $0 sanity|units [args]}
shift

site=$("$venv/bin/python" -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')
pip_version=$(grep -oP "pip='\K[0-9.]+" "$site/_internal/python_requirements.py")
standin=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [ ! -f "$standin" ]; then
  mkdir -p "$(dirname "$standin")"
  cat > "$standin" <<'PY'
# Offline stand-in for ansible-test's get-pip download (see tools/ansible-test.sh).
import ensurepip
import os
import runpy
import sys

ensurepip.bootstrap(upgrade=True)
# ensurepip sets these for its own run; pip must use the machine's settings.
for name in ("PIP_CONFIG_FILE", "ENSUREPIP_OPTIONS"):
    os.environ.pop(name, None)
# get-pip.py takes pip's install arguments (e.g. "pip==24.2 --disable-pip-version-check").
# --no-setuptools/--no-wheel are get-pip's own flags; plain pip would reject them.
sys.argv = ["pip", "install", *[arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]]
runpy.run_module("pip", run_name="__main__", alter_sys=True)
PY
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpufleet-ansible-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
dest=$work/ansible_collections/gpufleet/resilience
mkdir -p "$dest"
(cd "$repo" && git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$dest"
# ansible-test needs a git repo or it treats every file as untracked noise.
(cd "$dest" && git init -q && git add -A && git -c user.name=ci -c user.email=ci@localhost commit -qm copy)
cd "$dest"
export PATH=$venv/bin:$PATH
# No exec: the EXIT trap must still remove the copy.
case "$command" in
  sanity) ansible-test sanity --venv --python 3.11 --color no "$@" ;;
  units) ansible-test units --venv --python 3.11 --color no --requirements "$@" ;;
  *) echo "unknown command $command (sanity|units)" >&2; exit 2 ;;
esac

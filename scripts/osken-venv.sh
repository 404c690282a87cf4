#!/usr/bin/env bash
# osken-venv.sh [DIR] — make the Python venv with os-ken that the OpenFlow
# controller acceptance test (pkg/switchd/osken_test.go, test/osken/) runs.
# DIR defaults to $NAGARE_OSKEN_VENV or /var/cache/nagare/osken-venv, where
# the test looks. Idempotent: does nothing, and uses no network, when
# DIR/bin/python imports os-ken already.
set -euo pipefail

dir=${1:-${NAGARE_OSKEN_VENV:-/var/cache/nagare/osken-venv}}
# Pinned: test/osken/ is written against this release.
osken=${NAGARE_OSKEN_VERSION:-4.2.2}
check='import os_ken.base.app_manager, os_ken.controller.controller'

if [ -x "$dir/bin/python" ] && "$dir/bin/python" -c "$check" 2>/dev/null; then
	exit 0
fi
# Debian's interpreter, not whatever python3 comes first on PATH.
py=/usr/bin/python3
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
	echo "osken-venv: $py lacks venv/ensurepip (Debian package python3-venv)" >&2
	exit 1
fi
echo "osken-venv: creating $dir (os-ken $osken from PyPI)"
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
# A half-made venv would pass for nothing but confuse the next run.
trap 'rm -rf "$dir"' ERR
"$py" -m venv "$dir"
"$dir/bin/pip" install --quiet --disable-pip-version-check "os-ken==$osken"
"$dir/bin/python" -c "$check"

#!/usr/bin/env bash
# deps.sh PKG... — install the Debian packages that are not installed yet, and
# check the Go toolchain. Safe to run again; does nothing when all is present.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
	echo "deps: run as root (apt-get, network namespaces and BPF need it)" >&2
	exit 1
fi

missing=()
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
	echo "deps: Go 1.24 or newer is needed (https://go.dev/dl); Debian 12's golang package is too old" >&2
	exit 1
fi

# The fast path pins its maps and links on a BPF filesystem.
if ! mount | grep -q ' /sys/fs/bpf type bpf'; then
	mkdir -p /sys/fs/bpf
	mount -t bpf bpffs /sys/fs/bpf
fi

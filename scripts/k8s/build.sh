#!/usr/bin/env bash
# build.sh — build kube-apiserver, kubelet and kube-controller-manager
# v1.33.13 from the Go module proxy, once, into a cache outside the repo
# (K8S_CACHE, default /var/cache/nagare/k8s/v1.33.13). Skipped when the
# binaries are there. About 10-12 minutes on 2 CPUs from empty caches.
#
# Why a separate tools module: k8s.io/kubernetes needs every staging module
# replaced by its v0.33.x release; the project's go.mod should not inherit
# thirty replace lines. Why 1.33: the 1.32 kubelet cannot be built from the
# proxy here, and newer kubelets refuse cgroup v1 (this VM has no v2).
set -euo pipefail
V=${K8S_VERSION:-v1.33.13}
SV=v0${V#v1}            # staging modules: v0.33.13
OUT=${K8S_CACHE:-/var/cache/nagare/k8s/$V}
BINS=(kube-apiserver kubelet kube-controller-manager)

have=1
for b in "${BINS[@]}"; do [ -x "$OUT/$b" ] || have=0; done
if [ $have = 1 ]; then
	echo "k8s: $V binaries present in $OUT"
	exit 0
fi
export PATH=$PATH:/usr/local/go/bin
SRC=$OUT/src
mkdir -p "$SRC"
cd "$SRC"
if [ ! -f go.mod ]; then
	go mod init nagare.local/k8s-tools >/dev/null 2>&1
fi
echo "k8s: resolving k8s.io/kubernetes@$V (staging modules at $SV)"
modfile=$(go mod download -json "k8s.io/kubernetes@$V" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
# Every staging module named in kubernetes' own go.mod, replaced by its release.
grep -oE 'k8s.io/[a-z0-9-]+ => ./staging' "$modfile" | awk '{print $1}' | sort -u | while read -r m; do
	go mod edit -replace "$m=$m@$SV"
done
go mod edit -require "k8s.io/kubernetes@$V"
echo "k8s: go get (this downloads ~500 MB of modules the first time)"
GOFLAGS=-mod=mod go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$V" "k8s.io/kubernetes/cmd/kubelet@$V" "k8s.io/kubernetes/cmd/kube-controller-manager@$V" >/dev/null
# Without the version, kubectl cannot parse the server's /version.
minor=${V#v1.}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld="$ld -X $p.gitVersion=$V -X $p.gitMajor=1 -X $p.gitMinor=$minor"
done
for b in "${BINS[@]}"; do
	echo "k8s: building $b"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$OUT/$b.tmp" "k8s.io/kubernetes/cmd/$b"
	mv "$OUT/$b.tmp" "$OUT/$b"
done
echo "k8s: built ${BINS[*]} into $OUT"

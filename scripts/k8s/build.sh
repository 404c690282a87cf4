#!/usr/bin/env bash
# build.sh — build the Kubernetes v1.33.13 binaries the real-Kubernetes tests
# run, from the Go module proxy, once, into a cache outside the repo
# (K8S_CACHE, default /var/cache/nagare/k8s/v1.33.13). Each artifact is
# skipped when present, so a later addition builds only what is new.
#
#   control plane + nodes: kube-apiserver kubelet kube-controller-manager
#                          kube-scheduler kube-proxy kubectl
#   test workloads:        agnhost (the e2e tests' workload binary,
#                          k8s.io/kubernetes/test/images/agnhost)
#   cluster DNS (K8S_DNS=1; make k8s-services-smoke and k8s-conformance set
#                          it): coredns from github.com/coredns/coredns. Not by
#                          default either: its module graph (cloud SDKs) is 1.3 GB
#                          of modules and ~19 min of build here, and the CI smoke
#                          test needs no DNS (the cluster runs CoreDNS when the
#                          image is in the cache).
#   conformance (K8S_E2E=1; make k8s-conformance sets it): e2e.test (go test -c
#                          of k8s.io/kubernetes/test/e2e) and the ginkgo CLI
#                          (runs e2e.test's specs in parallel). Not by default:
#                          make test (CI) runs the two-node smoke test only, and
#                          e2e.test is the longest build of all.
#
# Then the images (pause, agnhost, busybox, the stand-ins, coredns) as OCI
# tars in $OUT/images (scripts/k8s/e2eimages), also once.
#
# Why a separate tools module: k8s.io/kubernetes needs every staging module
# replaced by its v0.33.x release; the project's go.mod should not inherit
# thirty replace lines. Why 1.33: the 1.32 kubelet cannot be built from the
# proxy here, and newer kubelets refuse cgroup v1 (this VM has no v2).
# CoreDNS gets a module of its own: its go.mod pins its own client-go, and
# the staging replaces of the kubernetes module would force it to v0.33.
set -euo pipefail
V=${K8S_VERSION:-v1.33.13}
SV=v0${V#v1}            # staging modules: v0.33.13
OUT=${K8S_CACHE:-/var/cache/nagare/k8s/$V}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.3} # kubeadm v1.33 deploys v1.12.0; the proxy serves v1.14.3 and newer only
BINS=(kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)
E2E=${K8S_E2E:-0}
DNS=${K8S_DNS:-0}

want=("${BINS[@]}" agnhost)
[ "$E2E" = 1 ] && want+=(e2e.test ginkgo)
[ "$DNS" = 1 ] && want+=(coredns)
missing=()
for b in "${want[@]}"; do [ -x "$OUT/$b" ] || missing+=("$b"); done
REPO=$(cd "$(dirname "$0")/../.." && pwd)
# images writes the test images (scripts/k8s/e2eimages) once: the tools
# the agnhost stand-in carries come from Debian packages.
images() {
	"$REPO/scripts/deps.sh" bind9-dnsutils curl netcat-openbsd iproute2 busybox-static gcc nftables >/dev/null
	(cd "$REPO" && go run ./scripts/k8s/e2eimages -k8s "$OUT" -coredns-version "$COREDNS_VERSION")
}
if [ ${#missing[@]} = 0 ]; then
	echo "k8s: $V binaries present in $OUT"
	images
	exit 0
fi
echo "k8s: building ${missing[*]} into $OUT"
t0=$(date +%s)
export PATH=$PATH:/usr/local/go/bin
has() { local x; for x in "${missing[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }
# Without the version, kubectl cannot parse the server's /version, and the
# e2e framework logs an "unknown" client version.
minor=${V#v1.}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld="$ld -X $p.gitVersion=$V -X $p.gitMajor=1 -X $p.gitMinor=$minor"
done

SRC=$OUT/src
mkdir -p "$SRC"
cd "$SRC"
if [ ! -f go.mod ]; then
	go mod init nagare.local/k8s-tools >/dev/null 2>&1
fi
if ! grep -q "k8s.io/kubernetes $V" go.mod; then
	echo "k8s: resolving k8s.io/kubernetes@$V (staging modules at $SV)"
	modfile=$(go mod download -json "k8s.io/kubernetes@$V" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
	# Every staging module named in kubernetes' own go.mod, replaced by its release.
	grep -oE 'k8s.io/[a-z0-9-]+ => ./staging' "$modfile" | awk '{print $1}' | sort -u | while read -r m; do
		go mod edit -replace "$m=$m@$SV"
	done
	go mod edit -require "k8s.io/kubernetes@$V"
fi
tools=()
for b in "${BINS[@]}"; do has "$b" && tools+=("k8s.io/kubernetes/cmd/$b@$V"); done
has agnhost && tools+=("k8s.io/kubernetes/test/images/agnhost@$V")
if [ ${#tools[@]} -gt 0 ]; then
	echo "k8s: go get (this downloads ~500 MB of modules the first time)"
	GOFLAGS=-mod=mod go get -tool "${tools[@]}" >/dev/null
fi
for b in "${BINS[@]}"; do
	has "$b" || continue
	echo "k8s: building $b"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$OUT/$b.tmp" "k8s.io/kubernetes/cmd/$b"
	mv "$OUT/$b.tmp" "$OUT/$b"
done
if has agnhost; then
	echo "k8s: building agnhost"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$OUT/agnhost.tmp" k8s.io/kubernetes/test/images/agnhost
	mv "$OUT/agnhost.tmp" "$OUT/agnhost"
fi
if has e2e.test; then
	echo "k8s: building e2e.test (go test -c k8s.io/kubernetes/test/e2e)"
	# go test -c needs the test-only imports of test/e2e in the module graph;
	# -mod=mod lets go add them to the tools module. One staging module is
	# not served at $SV by the module proxy here: k8s.io/sample-apiserver
	# (403 "not available"; test/e2e/apimachinery imports it). The nearest
	# 1.33 release it serves stands in (its types are what e2e uses).
	go mod edit -replace "k8s.io/sample-apiserver=k8s.io/sample-apiserver@${SAMPLE_APISERVER_VERSION:-v0.33.5}"
	CGO_ENABLED=0 GOFLAGS=-mod=mod go test -c -trimpath -ldflags "$ld" -o "$OUT/e2e.test.tmp" k8s.io/kubernetes/test/e2e
	mv "$OUT/e2e.test.tmp" "$OUT/e2e.test"
fi
if has ginkgo; then
	# The ginkgo CLI runs e2e.test's specs in parallel processes (as
	# kubernetes' hack/ginkgo-e2e.sh does): run one after the other, the
	# [sig-network] conformance specs that wait out their timeouts today
	# (DNS through a ClusterIP nagare does not serve yet: 10 minutes each)
	# would take hours. The version kubernetes' go.mod names.
	gv=$(grep -E '^\s+github.com/onsi/ginkgo/v2 ' "$(go mod download -json "k8s.io/kubernetes@$V" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')" | awk '{print $2}')
	echo "k8s: building ginkgo $gv"
	GOFLAGS=-mod=mod go get -tool "github.com/onsi/ginkgo/v2/ginkgo@$gv" >/dev/null
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$OUT/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo
	mv "$OUT/ginkgo.tmp" "$OUT/ginkgo"
fi
if has coredns; then
	echo "k8s: building coredns $COREDNS_VERSION"
	DSRC=$OUT/src-coredns
	mkdir -p "$DSRC"
	cd "$DSRC"
	[ -f go.mod ] || go mod init nagare.local/coredns-tools >/dev/null 2>&1
	GOFLAGS=-mod=mod go get -tool "github.com/coredns/coredns@$COREDNS_VERSION" >/dev/null
	CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$OUT/coredns.tmp" github.com/coredns/coredns
	mv "$OUT/coredns.tmp" "$OUT/coredns"
fi
echo "k8s: built ${missing[*]} into $OUT in $(( $(date +%s) - t0 )) s"
images

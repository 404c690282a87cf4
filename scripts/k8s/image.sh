#!/usr/bin/env bash
# image.sh — build nagare's container image as an OCI tar and, if a
# containerd socket is given, import it for the kubelet (deploy/nagare.yaml
# runs nagare:dev, imagePullPolicy IfNotPresent: deploy/kustomization.yaml). No registry, no Docker.
#
#   scripts/k8s/image.sh [OUT.tar] [CONTAINERD_SOCKET]
#   ctr -n k8s.io images import OUT.tar            # on every node
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=$PATH:/usr/local/go/bin
OUT=${1:-bin/nagare-image.tar}
REF=${NAGARE_IMAGE:-docker.io/library/nagare:dev}
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
# Static binaries: the image has no libc. portmap: the reference CNI plugin
# (go.mod's containernetworking/plugins, a tool there), chained for hostPort.
CGO_ENABLED=0 go build -o "$BIN/" ./cmd/nagare-agent ./cmd/nagare-switch ./cmd/nagare-cni ./cmd/nagarectl \
	github.com/containernetworking/plugins/plugins/meta/portmap
mkdir -p "$(dirname "$OUT")"
go run ./scripts/k8s/mkimage -bin "$BIN" -ref "$REF" -o "$OUT"
if [ -n "${2:-}" ]; then
	ctr --address "$2" -n k8s.io images import "$OUT"
fi

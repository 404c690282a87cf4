#!/usr/bin/env bash
# sameport-watch.sh — catch the conformance spec "should serve endpoints on
# same port and different protocols" in the act on test/k8s's two-node
# cluster (docs/k8s-conformance.md, "The same-port flake"). Run it beside a
# conformance run (K8S_CONFORMANCE_REPEAT=N for many attempts): each time the
# spec's Service multiprotocol-test is TCP-only, it probes the ClusterIP from
# the spec's exec pod (the spec's own nc command) and, at the first failed
# probe while the Service is still TCP-only, dumps both nodes' switch and
# agent: Services, pods, show (drops by reason and port), conntrack,
# dump-cache, dump-flows, a trace of a SYN from the exec pod, the pipeline.
#
#   scripts/k8s/sameport-watch.sh OUTDIR     # stop: touch OUTDIR/stop
#   NAGARECTL=path/to/nagarectl (default: nagarectl on PATH, of the build under test)
#   SAMEPORT_WATCH_ALWAYS=1: dump at the first probe whatever it gave (to check the dumps work)
set -u
out=$1; mkdir -p "$out"
K=${K8S_CACHE:-/var/cache/nagare/k8s/v1.33.13}/kubectl
CTL=${NAGARECTL:-$(command -v nagarectl)}
seen=""
holder() { for p in $(ip netns pids $1 2>/dev/null); do [ "$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" = "sleep 2147483647 " ] && echo $p; done; }
capture() { # dir ns ip
  local d=$1 ns=$2 ip=$3
  $K --kubeconfig $cfg -n $ns get pod -o wide > $d/pods.txt 2>&1
  $K --kubeconfig $cfg -n $ns get endpointslices -o yaml > $d/slices.yaml 2>&1
  $K --kubeconfig $cfg -n $ns get svc -o yaml > $d/svc.yaml 2>&1
  epip=$(awk '/execpod/{print $6}' $d/pods.txt)
  for n in nk8s-node1 nk8s-node2; do
    h=$(holder $n); [ -z "$h" ] && continue
    X="nsenter --target=$h --mount --net $CTL"
    { date +%T.%N
      $X agent services | grep -E "SERVICE|$ns"
      echo "=== pods"; $X agent pods
      echo "=== show"; $X show
      echo "=== conntrack"; $X conntrack
      echo "=== dump-cache"; $X dump-cache
      echo "=== dump-flows"; $X dump-flows
      line=$($X agent pods | grep " $epip ")
      if [ -n "$line" ]; then
        port=$(echo "$line" | awk '{print $4}'); mac=$(echo "$line" | awk '{print $3}')
        echo "=== trace in_port=$port"
        $X trace "in_port=$port,tcp,dl_src=$mac,nw_src=$epip,nw_dst=$ip,tp_src=45678,tp_dst=80"
      fi
      echo "=== pipeline"; $X agent pipeline
      date +%T.%N
    } > $d/node-$n.txt 2>&1
  done
}
while [ ! -e "$out/stop" ]; do
  cfg=$(ls -td /var/tmp/nagare-k8s2-*/admin.kubeconfig 2>/dev/null | head -1)
  [ -z "$cfg" ] && { sleep 2; continue; }
  lines=$($K --kubeconfig $cfg get svc -A --field-selector metadata.name=multiprotocol-test -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.resourceVersion} {.spec.clusterIP} {.spec.ports[*].protocol}{"\n"}{end}' 2>/dev/null)
  while read -r ns rv ip protos; do
    [ -z "$ns" ] && continue
    [ "$protos" != "TCP" ] && continue
    case " $seen " in *" $ns/$rv "*) continue;; esac
    seen="$seen $ns/$rv"
    d=$out/$ns-$(date +%H%M%S); mkdir -p $d
    ep=$($K --kubeconfig $cfg -n $ns get pod -o name | grep execpod | head -1)
    [ "${SAMEPORT_WATCH_ALWAYS:-}" = 1 ] && capture $d $ns $ip
    for i in 1 2 3 4 5 6 7 8; do
      echo "--- $(date +%T.%N) probe $i" >> $d/probe.txt
      if timeout 10 $K --kubeconfig $cfg -n $ns exec ${ep#pod/} -- sh -c "echo hostName | nc -v -t -w 2 $ip 80" >> $d/probe.txt 2>&1; then
        echo OK >> $d/probe.txt
      else
        now=$($K --kubeconfig $cfg -n $ns get svc multiprotocol-test -o jsonpath='{.spec.ports[*].protocol}')
        echo "FAIL (ports now: $now) $(date +%T.%N)" >> $d/probe.txt
        if [ "$now" = "TCP" ] && [ ! -e $d/node-nk8s-node1.txt ]; then capture $d $ns $ip; echo "captured $d" ; fi
        [ "$now" != "TCP" ] && break
      fi
    done
  done <<< "$lines"
  sleep 0.5
done

package agent

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/nagare-net/nagare/pkg/agent/nodenet"
	"github.com/nagare-net/nagare/pkg/agent/pipeline"
)

// Transparent redirection to the node's proxy (cluster file:
// proxyRedirect; pipeline: proxyredirect.go; node: nodenet.EnsureProxyLink).
// The agent makes the proxy's link and switch port, tells the pipeline
// what is redirected, and watches the proxy: it dials the proxy's health
// address in the node's namespace every interval, and when the answer
// changes moves new selected connections to the proxy or to the fallback
// (fail open: direct; fail closed: refused). Established connections keep
// their path (the tracker's mark), whatever the proxy's state.

// redirectState is the agent's side of transparent redirection.
type redirectState struct {
	link  nodenet.ProxyLink
	port  uint32      // the proxy port on the switch (0: not attached yet)
	up    atomic.Bool // the proxy answered at the last check
	downs atomic.Uint64
}

// setupProxyLink makes the proxy's link when redirection is configured.
func (a *Agent) setupProxyLink() error {
	if a.cfg.Cluster.ProxyRedirect == nil {
		return nil
	}
	l, err := a.net.EnsureProxyLink(nodenet.DefaultProxy)
	if err != nil {
		return err
	}
	a.redirect.link = l
	a.redirect.up.Store(a.proxyAnswers())
	return nil
}

// AnnotationProxyRedirect set to "false" on a pod opts it out of
// transparent redirection (Kubernetes; the cluster file's optOut names
// pods otherwise). Read at the pod's ADD and at every switch sync.
const AnnotationProxyRedirect = "nagare.io/proxy-redirect"

// optedOut says whether pod (namespace/name) carries the opt-out
// annotation; wait is how long to ask the API server for a pod its cache
// does not hold yet (0: the cache only).
func (a *Agent) optedOut(ctx context.Context, pod string, wait time.Duration) bool {
	if a.cfg.Cluster.ProxyRedirect == nil || a.cfg.Kube == nil {
		return false
	}
	ns, name, ok := strings.Cut(pod, "/")
	if !ok {
		return false
	}
	return a.cfg.Kube.PodAnnotation(ctx, ns, name, AnnotationProxyRedirect, wait) == "false"
}

// pipelineRedirect is what the pipeline redirects, or nil.
func (a *Agent) pipelineRedirect() *pipeline.Redirect {
	r := a.cfg.Cluster.ProxyRedirect
	if r == nil || a.redirect.port == 0 {
		return nil
	}
	opt := map[string]bool{}
	for _, n := range r.OptOut {
		opt[n] = true
	}
	return &pipeline.Redirect{Port: a.redirect.port, MAC: a.redirect.link.MAC, Ports: r.Ports, Destinations: r.Destinations,
		FailClosed: r.FailClosed(), OptOut: opt}
}

// proxyAnswers says whether the proxy accepts a TCP connection on its health address.
func (a *Agent) proxyAnswers() bool {
	r := a.cfg.Cluster.ProxyRedirect
	timeout := time.Duration(r.HealthIntervalMS) * time.Millisecond
	dial := func() error {
		c, err := net.DialTimeout("tcp", r.HealthAddr, timeout)
		if err == nil {
			c.Close()
		}
		return err
	}
	var err error
	if p := a.nodeNetns(); p != "" {
		err = ns.WithNetNSPath(p, func(ns.NetNS) error { return dial() })
	} else {
		err = dial()
	}
	return err == nil
}

// proxyLoop watches the proxy and moves new connections when it comes or goes.
func (a *Agent) proxyLoop(ctx context.Context) {
	r := a.cfg.Cluster.ProxyRedirect
	if r == nil {
		return
	}
	t := time.NewTicker(time.Duration(r.HealthIntervalMS) * time.Millisecond)
	defer t.Stop()
	programmed := a.redirect.up.Load()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		up := a.proxyAnswers()
		if was := a.redirect.up.Swap(up); was != up {
			a.log.Warn("node proxy", "up", up, "health", r.HealthAddr, "failMode", r.FailMode)
			if !up {
				a.redirect.downs.Add(1)
			}
		}
		if up == programmed {
			continue
		}
		pl, err := a.connected()
		if err != nil {
			continue // the next sync programs the state
		}
		a.swMu.Lock()
		err = pl.SetProxyUp(ctx, up)
		a.swMu.Unlock()
		if err != nil {
			a.log.Error("move new connections for the proxy's state", "up", up, "err", err)
			continue
		}
		programmed = up
	}
}

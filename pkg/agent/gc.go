package agent

import (
	"context"
	"errors"
	"time"

	"github.com/nagare-net/nagare/pkg/agent/k8s"
	"github.com/nagare-net/nagare/pkg/agent/podnet"
)

// gcLoop releases leaked allocations: ADDs that died half-way (the agent
// was killed), pods whose DEL never came. Under Kubernetes a pod is gone
// when the API server has no such pod on this node; without it, when its
// network namespace is gone. Young allocations are left alone: their ADD
// may still be running.
func (a *Agent) gcLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.GCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		keep, err := a.liveness()
		if err != nil {
			a.log.Warn("GC skipped", "err", err)
			continue
		}
		if n, err := a.collect(ctx, "periodic", keep); err != nil || n > 0 {
			a.log.Info("GC", "released", n, "err", err)
		}
		if a.vf != nil {
			if n, err := a.vf.Reconcile(a.podHosts); err != nil || n > 0 {
				a.log.Info("GC of VF links", "removed", n, "err", err)
			}
		}
	}
}

// liveness says which records belong to pods that still exist.
func (a *Agent) liveness() (func(*podRecord) bool, error) {
	grace := time.Now().Add(-a.cfg.GCGrace)
	if a.cfg.Kube != nil {
		pods, err := a.cfg.Kube.LocalPods()
		if err != nil {
			return nil, err
		}
		return livePods(pods, grace), nil
	}
	return func(p *podRecord) bool {
		if p.Created.After(grace) {
			return true
		}
		err := podnet.Exists(p.Netns)
		return err == nil || !errors.Is(err, podnet.ErrNoNetns)
	}, nil
}

// collect detaches every record keep refuses and returns how many went.
func (a *Agent) collect(ctx context.Context, why string, keep func(*podRecord) bool) (int, error) {
	a.mu.Lock()
	var gone []*podRecord
	for _, p := range a.pods {
		if !keep(p) {
			gone = append(gone, p)
		}
	}
	a.mu.Unlock()
	var errs []error
	n := 0
	for _, p := range gone {
		unlock := a.locks.lock(p.Key)
		a.mu.Lock()
		still := a.pods[p.Key] == p
		a.mu.Unlock()
		if still {
			log := a.podLog(p).With("gc", why)
			if err := a.detach(ctx, p, log); err != nil {
				errs = append(errs, err)
			} else {
				n++
				a.met.gcReleased.Inc()
			}
		}
		unlock()
	}
	return n, errors.Join(errs...)
}

// livePods keeps the records of pods the API server has on this node (and
// the young ones). A record is its pod's by UID: a pod deleted and
// created again under its name (a StatefulSet's) is another pod, whose
// sandbox is not this record's. Records of an agent that did not keep
// UIDs fall back to the name.
func livePods(pods []k8s.PodRef, grace time.Time) func(*podRecord) bool {
	uids, names := map[string]bool{}, map[string]bool{}
	for _, p := range pods {
		uids[p.UID] = true
		names[p.Namespace+"/"+p.Name] = true
	}
	return func(p *podRecord) bool {
		if p.Created.After(grace) {
			return true
		}
		if p.PodUID != "" {
			return uids[p.PodUID]
		}
		return names[p.Pod]
	}
}

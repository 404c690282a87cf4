// Package k8s is the agent's Kubernetes source: the cluster's nodes (pod
// CIDR from spec.podCIDR, underlay address from the InternalIP) and the
// pods scheduled to this node, from client-go informers. Leader-free: every
// agent watches for itself.
package k8s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nagare-net/nagare/pkg/agent/config"
)

// NodeHandler hears about the cluster's nodes.
type NodeHandler interface {
	NodeUpdated(n config.Node) // added or changed
	NodeDeleted(name string)
}

// PodRef names a pod on this node.
type PodRef struct {
	Namespace, Name, UID string
}

// Source watches the API server.
type Source struct {
	client   kubernetes.Interface
	nodeName string
	log      *slog.Logger

	mu      sync.Mutex
	pods    listerv1.PodLister
	synced  chan struct{}
	skipped map[string]string // nodes not usable yet, and why (logged once)
}

// NewSource makes a source for the agent of nodeName.
func NewSource(client kubernetes.Interface, nodeName string, log *slog.Logger) *Source {
	if log == nil {
		log = slog.Default()
	}
	return &Source{client: client, nodeName: nodeName, log: log, synced: make(chan struct{}), skipped: map[string]string{}}
}

// ClientFromFlags builds a client from a kubeconfig, or from the pod's
// service account when inCluster.
func ClientFromFlags(kubeconfig string, inCluster bool) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if inCluster {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg.UserAgent = "nagare-agent"
	return kubernetes.NewForConfig(cfg)
}

// NodeFrom turns a Node object into the agent's node, or says why it
// cannot be used yet (no pod CIDR, no InternalIP).
func NodeFrom(n *corev1.Node) (config.Node, error) {
	out := config.Node{Name: n.Name}
	cidr := n.Spec.PodCIDR
	if cidr == "" {
		for _, c := range n.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() {
				cidr = c
				break
			}
		}
	}
	if cidr == "" {
		return out, errors.New("no spec.podCIDR yet")
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return out, fmt.Errorf("spec.podCIDR %q: %w", cidr, err)
	}
	out.PodCIDR = p
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			out.Underlay = ip
			break
		}
	}
	if !out.Underlay.IsValid() {
		return out, errors.New("no IPv4 InternalIP in status.addresses yet")
	}
	return out, out.Check()
}

// Run starts the informers and tells h about every node (this one too:
// the agent ignores it) until ctx ends.
func (s *Source) Run(ctx context.Context, h NodeHandler) error {
	nf := informers.NewSharedInformerFactory(s.client, 0)
	ni := nf.Core().V1().Nodes().Informer()
	_, err := ni.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.node(o, h) },
		UpdateFunc: func(_, o any) { s.node(o, h) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if n, ok := o.(*corev1.Node); ok {
				h.NodeDeleted(n.Name)
			}
		},
	})
	if err != nil {
		return err
	}
	pf := informers.NewSharedInformerFactoryWithOptions(s.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", s.nodeName).String()
	}))
	s.mu.Lock()
	s.pods = pf.Core().V1().Pods().Lister()
	s.mu.Unlock()
	nf.Start(ctx.Done())
	pf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), ni.HasSynced, pf.Core().V1().Pods().Informer().HasSynced) {
		return ctx.Err()
	}
	close(s.synced)
	s.log.Info("Kubernetes caches synced", "node", s.nodeName)
	<-ctx.Done()
	nf.Shutdown()
	pf.Shutdown()
	return nil
}

func (s *Source) node(o any, h NodeHandler) {
	n, ok := o.(*corev1.Node)
	if !ok {
		return
	}
	cn, err := NodeFrom(n)
	s.mu.Lock()
	why, skipped := s.skipped[n.Name]
	if err != nil {
		if !skipped || why != err.Error() {
			s.log.Info("node not usable yet", "remote", n.Name, "why", err)
		}
		s.skipped[n.Name] = err.Error()
		s.mu.Unlock()
		return
	}
	delete(s.skipped, n.Name)
	s.mu.Unlock()
	h.NodeUpdated(cn)
}

// LocalNode returns this node once it has a pod CIDR and an address.
func (s *Source) LocalNode(ctx context.Context) (config.Node, error) {
	logged := false
	for {
		n, err := s.client.CoreV1().Nodes().Get(ctx, s.nodeName, metav1.GetOptions{})
		if err == nil {
			cn, cerr := NodeFrom(n)
			if cerr == nil {
				return cn, nil
			}
			err = cerr
		}
		if !logged {
			s.log.Info("waiting for this node's Node object", "node", s.nodeName, "why", err)
			logged = true
		}
		select {
		case <-ctx.Done():
			return config.Node{}, fmt.Errorf("node %s: %w (last: %v)", s.nodeName, ctx.Err(), err)
		case <-time.After(time.Second):
		}
	}
}

// LocalPods lists the pods the API server has on this node (not host
// network ones), once the caches synced.
func (s *Source) LocalPods() ([]PodRef, error) {
	select {
	case <-s.synced:
	default:
		return nil, errors.New("Kubernetes caches not synced yet")
	}
	s.mu.Lock()
	l := s.pods
	s.mu.Unlock()
	ps, err := l.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var out []PodRef
	for _, p := range ps {
		if p.Spec.HostNetwork {
			continue
		}
		out = append(out, PodRef{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)})
	}
	return out, nil
}

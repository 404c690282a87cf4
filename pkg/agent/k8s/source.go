// Package k8s is the agent's Kubernetes source: the cluster's nodes (pod
// CIDR from spec.podCIDR, underlay address from the InternalIP), the pods
// scheduled to this node, and Services with their EndpointSlices (handed
// to the proxy's Tracker), from client-go informers. Leader-free: every
// agent watches for itself.
package k8s

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	listerv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/nagare-net/nagare/pkg/agent/config"
	"github.com/nagare-net/nagare/pkg/agent/netpol"
	"github.com/nagare-net/nagare/pkg/agent/proxy"
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

// ServiceHandler hears about Services and EndpointSlices
// (*proxy.Tracker is one).
type ServiceHandler interface {
	UpdateService(*corev1.Service)
	DeleteService(proxy.ServiceKey)
	UpdateEndpointSlice(*discoveryv1.EndpointSlice)
	DeleteEndpointSlice(*discoveryv1.EndpointSlice)
}

// PolicyHandler hears about what NetworkPolicies look at: the policies,
// every namespace's labels and every pod of the cluster (*netpol.Engine
// behind a wrapper that wakes the agent's policy loop).
type PolicyHandler interface {
	SetPolicy(*networkingv1.NetworkPolicy)
	DeletePolicy(namespace, name string)
	SetPod(*netpol.Pod)
	DeletePod(namespace, name string)
	SetNamespace(name string, labels map[string]string)
	DeleteNamespace(name string)
}

// Source watches the API server.
type Source struct {
	client   kubernetes.Interface
	nodeName string
	log      *slog.Logger
	services ServiceHandler // nil: Services are not watched
	policies PolicyHandler  // nil: NetworkPolicies are not watched

	eventsOnce sync.Once
	events     record.EventRecorder

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

// ServiceAccountDir is where a pod finds its service account's token and
// the cluster's CA.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// ClientFromFlags builds a client from a kubeconfig, or from the pod's
// service account when inCluster. apiServer, when set (the ConfigMap's
// kubeAPIServerOverride), is the API server's address, used before
// anything else.
func ClientFromFlags(kubeconfig string, inCluster bool, apiServer string) (kubernetes.Interface, error) {
	cfg, err := RESTConfig(kubeconfig, inCluster, apiServer, ServiceAccountDir)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kubernetes.NewForConfig(cfg)
}

// RESTConfig is the agent's client configuration. In a pod, client-go
// would reach the API server through the kubernetes Service
// (KUBERNETES_SERVICE_HOST, a ClusterIP): that is a Service this agent
// programs, so on a node where no proxy runs yet the agent would wait on
// itself forever. With apiServer set it goes straight there, with the
// service account's token and CA from saDir (in a pod) or the
// kubeconfig's credentials (outside one).
func RESTConfig(kubeconfig string, inCluster bool, apiServer, saDir string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case apiServer != "" && inCluster:
		if u, perr := url.Parse(apiServer); perr != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("kubeAPIServerOverride %q: want https://HOST:PORT", apiServer)
		}
		token := filepath.Join(saDir, "token")
		if _, err := os.Stat(token); err != nil {
			return nil, fmt.Errorf("kubeAPIServerOverride %s: service account token: %w", apiServer, err)
		}
		cfg = &rest.Config{Host: apiServer, BearerTokenFile: token,
			TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(saDir, "ca.crt")}}
	case inCluster:
		cfg, err = rest.InClusterConfig()
	default:
		cfg, err = clientcmd.BuildConfigFromFlags(apiServer, kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "nagare-agent"
	return cfg, nil
}

// WatchServices makes Run follow Services and EndpointSlices into h (a
// *proxy.Tracker). Call it before Run.
func (s *Source) WatchServices(h ServiceHandler) { s.services = h }

// ReportProblem is how the proxy's bad input is told (the Tracker's
// report function): a log line and a Warning Event on the object, so
// `kubectl describe service` shows why it is not served.
func (s *Source) ReportProblem(p proxy.Problem) {
	s.log.Warn("service input refused", "object", p.Object, "namespace", p.Service.Namespace, "name", p.Name, "reason", p.Reason, "problem", p.Message)
	ref := &corev1.ObjectReference{Kind: p.Object, APIVersion: "v1", Namespace: p.Service.Namespace, Name: p.Name}
	if p.Object == "EndpointSlice" {
		ref.APIVersion = "discovery.k8s.io/v1"
	}
	s.recorder().Event(ref, corev1.EventTypeWarning, p.Reason, p.Message)
}

// recorder is the agent's Event recorder, made on first use.
func (s *Source) recorder() record.EventRecorder {
	s.eventsOnce.Do(func() {
		b := record.NewBroadcaster()
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: s.client.CoreV1().Events("")})
		s.events = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nagare-agent", Host: s.nodeName})
	})
	return s.events
}

// ReportNodeProblem is a Warning Event on a Node the agent refuses to
// use (its pod CIDR overlaps another node's), beside the log line.
func (s *Source) ReportNodeProblem(node, reason, message string) {
	s.recorder().Event(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node}, corev1.EventTypeWarning, reason, message)
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
	synced := []cache.InformerSynced{ni.HasSynced, pf.Core().V1().Pods().Informer().HasSynced}
	if s.services != nil {
		si, ei, err := s.serviceInformers(nf)
		if err != nil {
			return err
		}
		synced = append(synced, si.HasSynced, ei.HasSynced)
	}
	if s.policies != nil {
		ps, err := s.policyInformers(nf)
		if err != nil {
			return err
		}
		synced = append(synced, ps...)
	}
	nf.Start(ctx.Done())
	pf.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	close(s.synced)
	s.log.Info("Kubernetes caches synced", "node", s.nodeName)
	<-ctx.Done()
	nf.Shutdown()
	pf.Shutdown()
	return nil
}

// serviceInformers feeds Services and EndpointSlices to s.services.
func (s *Source) serviceInformers(f informers.SharedInformerFactory) (cache.SharedIndexInformer, cache.SharedIndexInformer, error) {
	h := s.services
	si := f.Core().V1().Services().Informer()
	if _, err := si.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.service(o, h.UpdateService) },
		UpdateFunc: func(_, o any) { s.service(o, h.UpdateService) },
		DeleteFunc: func(o any) {
			s.service(o, func(svc *corev1.Service) { h.DeleteService(proxy.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}) })
		},
	}); err != nil {
		return nil, nil, err
	}
	ei := f.Discovery().V1().EndpointSlices().Informer()
	if _, err := ei.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.slice(o, h.UpdateEndpointSlice) },
		UpdateFunc: func(_, o any) { s.slice(o, h.UpdateEndpointSlice) },
		DeleteFunc: func(o any) { s.slice(o, h.DeleteEndpointSlice) },
	}); err != nil {
		return nil, nil, err
	}
	return si, ei, nil
}

func (s *Source) service(o any, f func(*corev1.Service)) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if svc, ok := o.(*corev1.Service); ok {
		f(svc)
	}
}

func (s *Source) slice(o any, f func(*discoveryv1.EndpointSlice)) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if es, ok := o.(*discoveryv1.EndpointSlice); ok {
		f(es)
	}
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

// PodAnnotation is a local pod's annotation key: from the informer's
// cache, or (a pod the cache has not seen yet: its CNI ADD may come
// before the watch event) from the API server, at most timeout; "" when
// the pod or the annotation is unknown.
func (s *Source) PodAnnotation(ctx context.Context, namespace, name, key string, timeout time.Duration) string {
	s.mu.Lock()
	l := s.pods
	s.mu.Unlock()
	if l != nil {
		if p, err := l.Pods(namespace).Get(name); err == nil {
			return p.Annotations[key]
		}
	}
	if timeout <= 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p, err := s.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return p.Annotations[key]
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

// MarkNetworkAvailable sets this node's NetworkUnavailable condition to
// False (reason NagareIsUp), as a network plugin does once the node's pod
// network works: the node controller and some cloud providers set it True
// at registration, and the scheduler keeps pods off a node while it is.
// It retries until it succeeds or ctx ends (RBAC: nodes/status patch).
func (s *Source) MarkNetworkAvailable(ctx context.Context) error {
	now := metav1.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"False","reason":"NagareIsUp",`+
		`"message":"nagare's agent programmed this node's switch","lastTransitionTime":%q,"lastHeartbeatTime":%q}]}}`,
		corev1.NodeNetworkUnavailable, now, now)
	for {
		_, err := s.client.CoreV1().Nodes().PatchStatus(ctx, s.nodeName, []byte(patch))
		if err == nil {
			s.log.Info("node condition NetworkUnavailable=False", "node", s.nodeName)
			return nil
		}
		s.log.Warn("cannot clear NetworkUnavailable; retrying", "node", s.nodeName, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s NetworkUnavailable: %w (last: %v)", s.nodeName, ctx.Err(), err)
		case <-time.After(5 * time.Second):
		}
	}
}

package proxy

import (
	"reflect"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Tracker keeps the Services and EndpointSlices last seen, computes each
// Service's desired state, and remembers which Services changed since the
// last Take. Updates between two Takes coalesce: a Service updated a
// hundred times is computed, and reported, once; one whose computed state
// did not change (a slice's resourceVersion moved, nothing else) is not
// reported at all. Whoever programs the switch waits on Changed, calls
// Take and touches only what Take returns.
//
// The objects handed in are read, never modified (informer caches share
// them); the Services handed out must not be modified either.
type Tracker struct {
	mu       sync.Mutex
	node     Node
	report   func(Problem)
	services map[ServiceKey]*corev1.Service
	slices   map[ServiceKey]map[string]*discoveryv1.EndpointSlice
	owner    map[ServiceKey]ServiceKey // slice (namespace, name) → its Service
	dirty    map[ServiceKey]bool
	state    map[ServiceKey]*Service  // the state Take last reported
	problems map[ServiceKey][]Problem // per Service, as last computed
	changed  chan struct{}
}

// NewTracker makes a tracker for node. report hears of every Problem when
// it first appears (a log line, a Kubernetes Event); nil ignores them
// (Problems still lists them).
func NewTracker(node Node, report func(Problem)) *Tracker {
	if report == nil {
		report = func(Problem) {}
	}
	return &Tracker{node: node, report: report,
		services: map[ServiceKey]*corev1.Service{}, slices: map[ServiceKey]map[string]*discoveryv1.EndpointSlice{},
		owner: map[ServiceKey]ServiceKey{}, dirty: map[ServiceKey]bool{}, state: map[ServiceKey]*Service{},
		problems: map[ServiceKey][]Problem{}, changed: make(chan struct{}, 1)}
}

// Changes is what changed since the last Take.
type Changes struct {
	// Updated are Services to program as given (new or changed), sorted by key.
	Updated []*Service
	// Deleted are Services to remove: deleted, refused, or no longer
	// anything to program (made headless), sorted.
	Deleted []ServiceKey
}

// Changed fires (at most one pending signal) when something is waiting
// for Take.
func (t *Tracker) Changed() <-chan struct{} { return t.changed }

// Pending is how many Services were touched since the last Take (some
// may turn out unchanged).
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.dirty)
}

func (t *Tracker) markLocked(k ServiceKey) {
	t.dirty[k] = true
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// SetNode changes the node's addresses or the pod network; every Service
// is computed again (NodePort frontends, the ClusterIP check).
func (t *Tracker) SetNode(n Node) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if reflect.DeepEqual(t.node, n) {
		return
	}
	t.node = n
	for k := range t.services {
		t.markLocked(k)
	}
}

// UpdateService records a Service, added or changed.
func (t *Tracker) UpdateService(svc *corev1.Service) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := ServiceKey{svc.Namespace, svc.Name}
	t.services[k] = svc
	t.markLocked(k)
}

// DeleteService forgets a Service (its slices stay until they are
// deleted too: a Service re-created at once finds them).
func (t *Tracker) DeleteService(k ServiceKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.services, k)
	t.markLocked(k)
}

// UpdateEndpointSlice records an EndpointSlice, added or changed. A slice
// without the kubernetes.io/service-name label belongs to no Service and
// is ignored, as kube-proxy does.
func (t *Tracker) UpdateEndpointSlice(es *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := ServiceKey{es.Namespace, es.Name}
	svc, ok := es.Labels[discoveryv1.LabelServiceName]
	if old, had := t.owner[id]; had && (!ok || old.Name != svc) {
		t.removeSliceLocked(id, old) // relabelled: it left its old Service
	}
	if !ok || svc == "" {
		return
	}
	k := ServiceKey{es.Namespace, svc}
	if t.slices[k] == nil {
		t.slices[k] = map[string]*discoveryv1.EndpointSlice{}
	}
	t.slices[k][es.Name] = es
	t.owner[id] = k
	t.markLocked(k)
}

// DeleteEndpointSlice forgets an EndpointSlice.
func (t *Tracker) DeleteEndpointSlice(es *discoveryv1.EndpointSlice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := ServiceKey{es.Namespace, es.Name}
	if k, ok := t.owner[id]; ok {
		t.removeSliceLocked(id, k)
	}
}

func (t *Tracker) removeSliceLocked(id, k ServiceKey) {
	delete(t.slices[k], id.Name)
	if len(t.slices[k]) == 0 {
		delete(t.slices, k)
	}
	delete(t.owner, id)
	t.markLocked(k)
}

// Take computes the Services changed since the last Take and returns
// them; only those are computed, so its cost follows the changes, not the
// number of Services.
func (t *Tracker) Take() Changes {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ch Changes
	dirty := make([]ServiceKey, 0, len(t.dirty))
	for k := range t.dirty {
		dirty = append(dirty, k)
	}
	sort.Slice(dirty, func(i, j int) bool { return less(dirty[i], dirty[j]) }) // problems reported in a stable order
	for _, k := range dirty {
		s, problems := t.computeLocked(k)
		t.noteProblemsLocked(k, problems)
		old, had := t.state[k]
		switch {
		case s == nil && had:
			delete(t.state, k)
			ch.Deleted = append(ch.Deleted, k)
		case s != nil && (!had || !reflect.DeepEqual(old, s)):
			t.state[k] = s
			ch.Updated = append(ch.Updated, s)
		}
	}
	// A fresh map, not clear(): clearing walks every bucket the map ever
	// grew, so after a full sync of ten thousand Services each later Take
	// would pay for all of them again.
	t.dirty = map[ServiceKey]bool{}
	return ch
}

// computeLocked is one Service's desired state; nil when there is nothing
// to program (no such Service, refused, headless).
func (t *Tracker) computeLocked(k ServiceKey) (*Service, []Problem) {
	svc := t.services[k]
	if svc == nil {
		return nil, nil
	}
	s, problems, refused := serviceFrom(svc, t.node)
	if refused || s == nil {
		return nil, problems
	}
	byPort, sliceProblems := sliceEndpoints(k, t.slices[k], t.node.Name)
	problems = append(problems, sliceProblems...)
	for _, p := range s.Ports {
		p.Endpoints = byPort[portID{p.Name, p.Protocol}]
		categorize(s, p)
	}
	return s, problems
}

// noteProblemsLocked keeps a Service's problems and reports the new ones.
func (t *Tracker) noteProblemsLocked(k ServiceKey, ps []Problem) {
	old := map[Problem]bool{}
	for _, p := range t.problems[k] {
		old[p] = true
	}
	for _, p := range ps {
		if !old[p] {
			t.report(p)
		}
	}
	if len(ps) == 0 {
		delete(t.problems, k)
	} else {
		t.problems[k] = ps
	}
}

// Services is the desired state as of the last Take, sorted by key.
func (t *Tracker) Services() []*Service {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*Service, 0, len(t.state))
	for _, s := range t.state {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return less(out[i].Key, out[j].Key) })
	return out
}

// Problems lists the bad input standing as of the last Take.
func (t *Tracker) Problems() []Problem {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Problem
	for _, ps := range t.problems {
		out = append(out, ps...)
	}
	sort.SliceStable(out, func(i, j int) bool { return less(out[i].Service, out[j].Service) })
	return out
}

func less(a, b ServiceKey) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

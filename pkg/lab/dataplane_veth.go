package lab

import (
	"context"
	"fmt"
)

// vethPlane joins each pair of pods with one veth pair: no switch at all,
// the floor every other data plane is compared with.
type vethPlane struct{}

func init() { RegisterDataPlane(func() DataPlane { return &vethPlane{} }) }

func (*vethPlane) Name() string { return "veth" }

func (*vethPlane) Description() string { return "A ⇄ veth ⇄ B, no switch (floor)" }

func (*vethPlane) Scope() Scope { return ScopeIntraNode }

func (*vethPlane) Available() error { return nil }

func (*vethPlane) Setup(ctx context.Context, t *Topology) error {
	return joinPairs(t, "veth", func(a, b *Pod) error { return t.AddDirectLink(ctx, a, b) })
}

// joinPairs calls join for each of t.Pairs, for planes that join two pods
// and nothing else: each pod may be in one pair only.
func joinPairs(t *Topology, plane string, join func(a, b *Pod) error) error {
	used := map[*Pod]*Pod{}
	for _, pr := range t.Pairs {
		a, b := pr[0], pr[1]
		for _, p := range pr {
			if other, ok := used[p]; ok {
				return fmt.Errorf("%s joins exactly two pods; %s is paired with both %s and %s", plane, p.Name, other.Name, pr[0].Name+"/"+pr[1].Name)
			}
		}
		used[a], used[b] = b, a
		if err := join(a, b); err != nil {
			return err
		}
	}
	return nil
}

func (*vethPlane) Teardown(context.Context, *Topology) error { return nil }

func (*vethPlane) Processes() []int { return nil }

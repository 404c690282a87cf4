package main

import (
	"testing"

	"github.com/nagare-net/nagare/pkg/agent"
	"github.com/nagare-net/nagare/pkg/ofproto"
)

// TestPolicyNote: trace lines (as the switch prints them) of a rule's
// conj_id flow and of a pod's default deny are named by the agent's
// status; a clause's line and an unknown cookie are not.
func TestPolicyNote(t *testing.T) {
	st := &agent.Status{
		Policies: []agent.PolicyRuleStatus{
			{Rule: "shop/db-allow/ingress/0", Direction: "ingress", Pods: []string{"10.77.1.3"}, Cookie: 0x0611},
		},
		PolicyDrops: []agent.PolicyDropStatus{
			{Pod: "10.77.1.3", Direction: "ingress", Cookie: 0x0622},
			{Pod: "10.77.1.4", Direction: "egress", Cookie: 0x0633},
		},
	}
	names := st.PolicyCookies()
	line := func(cookie uint64, match, actions string) string {
		return ofproto.TraceStep{Kind: ofproto.TraceRule, TableID: 34, Priority: 200, Match: match, Cookie: cookie, Actions: actions}.String()
	}
	for _, c := range []struct{ line, want string }{
		{line(0x0611, "conj_id=2,ip", "goto_table:38"), "allowed by rule shop/db-allow/ingress/0 of policy shop/db-allow"},
		{line(0x0611, "ip,nw_dst=10.77.1.3", "conjunction(2,1/3)"), ""},
		{line(0x0622, "ip,nw_dst=10.77.1.3", "note:64.72.6f.70.3a.70.6f.6c.69.63.79.00.00.00"),
			"dropped by policy: 10.77.1.3 is isolated for ingress and no rule allows this (rules for it: shop/db-allow/ingress/0)"},
		{line(0x0633, "ip,nw_src=10.77.1.4", "note:64"), "dropped by policy: 10.77.1.4 is isolated for egress and no rule allows this (no rule for it: a deny-all policy)"},
		{line(0x0999, "ip", "goto_table:40"), ""},
		{"table 34: conjunction(2) complete at priority 200: lookup with conj_id=2", ""},
	} {
		if got := policyNote(c.line, names); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.line, got, c.want)
		}
	}
}

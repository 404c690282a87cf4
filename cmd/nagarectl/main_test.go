package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDispatchExitCodes(t *testing.T) {
	for _, c := range []struct {
		args       []string
		code       int
		wantStdout string
		wantStderr string
	}{
		{nil, 2, "", "usage: nagarectl COMMAND"},
		{[]string{"help"}, 0, "lab", ""},
		{[]string{"help", "lab"}, 0, "nagarectl lab run SCENARIO", ""},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"lab"}, 2, "", "missing subcommand"},
		{[]string{"lab", "walk"}, 2, "", `unknown lab subcommand "walk"`},
		{[]string{"lab", "run"}, 2, "", "want exactly one SCENARIO"},
		{[]string{"lab", "run", "a", "b"}, 2, "", "got 2"},
		{[]string{"lab", "run", "quickstart", "--reps", "x"}, 2, "", "invalid value"},
		{[]string{"lab", "run", "quickstart", "--bogus"}, 2, "", "flag provided but not defined"},
		{[]string{"lab", "run", "--reps", "-1", "quickstart"}, 2, "", "must not be negative"},
		{[]string{"lab", "run", "quickstart", "--duration", "soon"}, 2, "", `invalid value "soon" for flag -duration: duration "soon": want e.g. 5s, 500ms, 2m or a number of seconds`},
		{[]string{"lab", "run", "no-such-scenario", "--duration", "5s"}, 1, "", "not one of the built-in scenarios"}, // 5s accepted
		{[]string{"lab", "run", "no-such-scenario", "--duration", "5", "--timeout", "90"}, 1, "", "not one of the built-in scenarios"},
		{[]string{"lab", "run", "quickstart", "--duration", "-2s"}, 2, "", "must not be negative"},
		{[]string{"lab", "run", "quickstart", "--timeout", "later"}, 2, "", `invalid value "later" for flag -timeout`},
		{[]string{"lab", "run", "no-such-scenario"}, 1, "", "not one of the built-in scenarios"},
		{[]string{"lab", "list"}, 0, "quickstart", ""},
		{[]string{"lab", "list", "extra"}, 2, "", "takes no arguments"},
		{[]string{"lab", "report"}, 2, "", "takes one results directory"},
		{[]string{"lab", "report", "/nonexistent"}, 1, "", "results.json"},
		// nagarectl agent [--agent-socket PATH] VERB: the flag before the
		// verb (as the usage line writes it) or after; no agent there is
		// exit 1 (not a usage error).
		{[]string{"agent", "--agent-socket", "/nonexistent/agent.sock", "status"}, 1, "", "agent at /nonexistent/agent.sock"},
		{[]string{"agent", "status", "--agent-socket", "/nonexistent/agent.sock"}, 1, "", "agent at /nonexistent/agent.sock"},
		{[]string{"agent", "--agent-socket", "/nonexistent/agent.sock"}, 1, "", "agent at /nonexistent/agent.sock"},
		{[]string{"agent", "--agent-socket", "/nonexistent/agent.sock", "pods", "--json"}, 1, "", "agent at /nonexistent/agent.sock"},
		{[]string{"agent", "--agent-socket", "/nonexistent/agent.sock", "ready"}, 1, "", "agent at /nonexistent/agent.sock"},
		{[]string{"agent", "--agent-socket", "/nonexistent/agent.sock", "live"}, 1, "", "agent at /nonexistent/agent.sock"},
		{[]string{"agent", "--agent-socket", "/nonexistent/agent.sock", "direct-forward", "on"}, 1, "", "agent at /nonexistent/agent.sock"},
		{[]string{"agent", "--agent-socket", "/nonexistent/agent.sock", "direct-forward", "maybe"}, 2, "", "direct-forward on|off"},
		{[]string{"agent", "--agent-socket", "/nonexistent/agent.sock", "status", "extra"}, 2, "", "unexpected arguments"},
		{[]string{"agent", "--bogus", "status"}, 2, "", "flag provided but not defined"},
	} {
		var out, errb bytes.Buffer
		code := dispatch(c.args, &out, &errb)
		if code != c.code || !strings.Contains(out.String(), c.wantStdout) || !strings.Contains(errb.String(), c.wantStderr) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				c.args, code, out.String(), errb.String(), c.code, c.wantStdout, c.wantStderr)
		}
	}
}

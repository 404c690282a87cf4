package ofproto

import (
	"fmt"
	"strings"
)

// TraceKind says what a TraceStep records.
type TraceKind uint8

// Trace step kinds.
const (
	TraceRule       TraceKind = iota + 1 // a table lookup hit a rule
	TraceMiss                            // a table lookup found nothing: drop
	TraceGroup                           // a group chose its buckets
	TraceNormal                          // a NORMAL decision
	TraceController                      // an output to the controller
	TraceNote                            // anything else worth knowing (drops, skipped set_field, action set)
)

// TraceStep is one step of a traced translation.
type TraceStep struct {
	Kind     TraceKind
	TableID  uint8
	Priority uint16 // TraceRule
	Match    string // TraceRule: the rule's match in ovs-ofctl syntax
	Cookie   uint64 // TraceRule
	Actions  string // TraceRule: the rule's instructions
	Note     string // other kinds
}

// String prints the step on one line, as nagarectl trace shows it.
func (s TraceStep) String() string {
	if s.Kind == TraceRule {
		m := s.Match
		if m == "" {
			m = "(any)"
		}
		return fmt.Sprintf("table %d: priority=%d,%s cookie=%#x actions=%s", s.TableID, s.Priority, m, s.Cookie, s.Actions)
	}
	return fmt.Sprintf("table %d: %s", s.TableID, s.Note)
}

// FormatTrace prints a trace, one step per line.
func FormatTrace(steps []TraceStep) string {
	var b strings.Builder
	for _, s := range steps {
		b.WriteString(s.String())
		b.WriteByte('\n')
	}
	return b.String()
}

func (x *xlate) tracef(kind TraceKind, table uint8, format string, args ...any) {
	if !x.opts.Trace {
		return
	}
	x.trace = append(x.trace, TraceStep{Kind: kind, TableID: table, Note: fmt.Sprintf(format, args...)})
}

func (x *xlate) traceRule(r *rule) {
	if !x.opts.Trace {
		return
	}
	x.trace = append(x.trace, TraceStep{Kind: TraceRule, TableID: r.table, Priority: r.priority,
		Match: r.match.String(), Cookie: r.cookie, Actions: r.insts.String()})
}

package datapath

import (
	"encoding/binary"
	"fmt"

	"github.com/nagare-net/nagare/pkg/flow"
)

// Output sets (struct output_set, bpf/lib/maps.h): a flow holds at most
// MaxActions actions, so a flood to a large bridge (FLOOD, ALL, NORMAL's
// broadcast, an ALL group) could not be cached, and its first packet went
// nowhere. When a flow's actions do not fit, each run of consecutive
// outputs becomes one output-set action whose ports live in the
// output_sets map, shared by every flow with the same run (content
// addressed). Sets are written before any flow refers to them and freed by
// a sweep when the map is full: a set no installed flow and no cached
// execute slot refers to is free.
const (
	actOutputSet = 18
	// MaxSetPorts is how many ports one set reaches; longer runs take
	// several sets.
	MaxSetPorts = 256
	outputSets  = 1024
	setSize     = 8 + MaxSetPorts*8
)

// outputSetTable is the userspace view of the output_sets map: a set's
// content (its ifindex, flags pairs; never empty) by index, "" for a free
// one. Callers hold d.mu.
type outputSetTable struct {
	byKey map[string]uint32 // content → index
	keys  [outputSets]string
}

func newOutputSetTable() *outputSetTable { return &outputSetTable{byKey: map[string]uint32{}} }

// compressOutputs replaces runs of consecutive outputs (other than the
// last output, which must stay the program's redirect) by output-set
// actions. Called only for lists longer than MaxActions.
func (d *Datapath) compressOutputs(in []rawAction) ([]rawAction, error) {
	var out []rawAction
	for i := 0; i < len(in); {
		j := i
		for j < len(in) && in[j][0] == actOutput && in[j][1]&outLast == 0 {
			j++
		}
		if j-i < 2 {
			out = append(out, in[i])
			i++
			continue
		}
		for k := i; k < j; k += MaxSetPorts {
			idx, err := d.outputSet(in[k:min(j, k+MaxSetPorts)])
			if err != nil {
				return nil, err
			}
			var r rawAction
			r[0] = actOutputSet
			binary.NativeEndian.PutUint32(r[4:], idx)
			out = append(out, r)
		}
		i = j
	}
	return out, nil
}

// outputSet returns the index of the set holding outs' ports, writing a
// new one if none does.
func (d *Datapath) outputSet(outs []rawAction) (uint32, error) {
	key := make([]byte, 0, len(outs)*8)
	for _, o := range outs {
		key = binary.NativeEndian.AppendUint32(key, binary.NativeEndian.Uint32(o[4:]))
		key = binary.NativeEndian.AppendUint32(key, uint32(o[1]))
	}
	t := d.sets
	if idx, ok := t.byKey[string(key)]; ok {
		return idx, nil
	}
	idx, ok := t.free()
	if !ok {
		d.sweepOutputSets()
		if idx, ok = t.free(); !ok {
			return 0, fmt.Errorf("datapath: all %d output sets in use: %w", outputSets, ErrTooManyActs)
		}
	}
	b := make([]byte, setSize)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(outs)))
	copy(b[8:], key)
	if err := d.objs.OutputSets.Put(idx, b); err != nil {
		return 0, fmt.Errorf("datapath: writing output set %d: %w", idx, err)
	}
	t.byKey[string(key)], t.keys[idx] = idx, string(key)
	return idx, nil
}

func (t *outputSetTable) free() (uint32, bool) {
	for i, k := range t.keys {
		if k == "" {
			return uint32(i), true
		}
	}
	return 0, false
}

// setsOf lists the output sets a compiled action list refers to.
func setsOf(raw []rawAction) []uint32 {
	var s []uint32
	for _, r := range raw {
		if r[0] == actOutputSet {
			s = append(s, binary.NativeEndian.Uint32(r[4:]))
		}
	}
	return s
}

// sweepOutputSets frees every set that no installed flow and no cached
// execute slot refers to. (The kernel may still run a freed set's flow
// for an instant after a delete; the set is rewritten only when a new
// flood needs the slot, by which time that flow is gone.)
func (d *Datapath) sweepOutputSets() {
	var live [outputSets]bool
	for in := range d.flows.all() {
		for _, i := range in.sets {
			live[i] = true
		}
	}
	d.execMu.Lock()
	for entry := range d.execCache {
		_, raw, _ := decodeEntry([]byte(entry))
		for _, i := range setsOf(raw) {
			live[i] = true
		}
	}
	d.execMu.Unlock()
	t := d.sets
	for i, k := range t.keys {
		if k != "" && !live[i] {
			delete(t.byKey, k)
			t.keys[i] = ""
		}
	}
}

// restoreOutputSets reads the sets a previous process wrote.
func (d *Datapath) restoreOutputSets() error {
	b := make([]byte, setSize)
	for i := uint32(0); i < outputSets; i++ {
		if err := d.objs.OutputSets.Lookup(i, &b); err != nil {
			return err
		}
		n := binary.NativeEndian.Uint32(b[0:])
		if n == 0 || n > MaxSetPorts {
			continue
		}
		key := string(b[8 : 8+n*8])
		d.sets.byKey[key], d.sets.keys[i] = i, key
	}
	return nil
}

// expandOutputSet is decodeActions' view of a set: its outputs again.
func (d *Datapath) expandOutputSet(idx uint32) []flow.Action {
	if idx >= outputSets {
		return nil
	}
	key := d.sets.keys[idx]
	out := make([]flow.Action, 0, len(key)/8)
	for k := 0; k+8 <= len(key); k += 8 {
		port := uint32(0)
		if p := d.portByIfindex(int(binary.NativeEndian.Uint32([]byte(key[k:])))); p != nil {
			port = p.OFPort
		}
		out = append(out, flow.Output{Port: port})
	}
	return out
}

package openflow

import "testing"

// Benchmarks for the per-message costs the switch pays on every FLOW_MOD:
// go test -run '^$' -bench . ./pkg/openflow/

func BenchmarkUnmarshalFlowMod(b *testing.B) {
	raw := goldenMessages(b, "add_flow_tcp")[5]
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Unmarshal(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshalFlowMod(b *testing.B) {
	m, _ := Unmarshal(goldenMessages(b, "add_flow_tcp")[5])
	for b.Loop() {
		if _, err := m.MarshalBinary(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValidateFlowMod(b *testing.B) {
	m, _ := Unmarshal(goldenMessages(b, "add_flow_tcp")[5])
	fm := m.(*FlowMod)
	for b.Loop() {
		if err := fm.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}

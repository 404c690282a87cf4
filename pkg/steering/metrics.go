package steering

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the Flow Table's and the Core Table's counters as
// Prometheus metrics, read from the maps at scrape time.
type Collector struct{ u *Uplink }

// NewCollector returns a collector for u.
func NewCollector(u *Uplink) *Collector { return &Collector{u: u} }

var (
	descEntryPackets = prometheus.NewDesc("nagare_steering_entry_packets_total", "Packets matched by a VS-extend Flow Table entry.", []string{"entry", "match"}, nil)
	descEntryBytes   = prometheus.NewDesc("nagare_steering_entry_bytes_total", "Bytes matched by a VS-extend Flow Table entry.", []string{"entry", "match"}, nil)
	descEntryChanges = prometheus.NewDesc("nagare_steering_entry_choice_changes_total", "Times an entry's CPU was chosen or re-chosen.", []string{"entry", "match"}, nil)
	descEntryCPU     = prometheus.NewDesc("nagare_steering_entry_cpu", "The entry's CPU (-1: receiving CPU, -2: not chosen yet).", []string{"entry", "match"}, nil)
	descCPUPackets   = prometheus.NewDesc("nagare_steering_cpu_packets_total", "Packets steered to a CPU (cpu=\"stayed\": left on the receiving CPU).", []string{"cpu"}, nil)
	descCPUBytes     = prometheus.NewDesc("nagare_steering_cpu_bytes_total", "Bytes steered to a CPU.", []string{"cpu"}, nil)
	descCPULoad      = prometheus.NewDesc("nagare_steering_cpu_load_percent", "The Core Table's load of a CPU.", []string{"cpu"}, nil)
	descCPUPinned    = prometheus.NewDesc("nagare_steering_cpu_pinned_workload", "Workload id pinned to a CPU (0: none).", []string{"cpu"}, nil)
	descCPUFlows     = prometheus.NewDesc("nagare_steering_cpu_flows", "Choose entries holding a CPU.", []string{"cpu"}, nil)
	descEvents       = prometheus.NewDesc("nagare_steering_events_total", "Steering events by kind.", []string{"event"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEntryPackets, descEntryBytes, descEntryChanges, descEntryCPU,
		descCPUPackets, descCPUBytes, descCPULoad, descCPUPinned, descCPUFlows, descEvents} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if es, err := c.u.Entries(); err == nil {
		for _, e := range es {
			id, m := strconv.Itoa(int(e.ID)), e.Match.String()
			ch <- prometheus.MustNewConstMetric(descEntryPackets, prometheus.CounterValue, float64(e.Packets), id, m)
			ch <- prometheus.MustNewConstMetric(descEntryBytes, prometheus.CounterValue, float64(e.Bytes), id, m)
			ch <- prometheus.MustNewConstMetric(descEntryChanges, prometheus.CounterValue, float64(e.Changes), id, m)
			ch <- prometheus.MustNewConstMetric(descEntryCPU, prometheus.GaugeValue, cpuValue(e.CPU), id, m)
		}
	}
	if rows, err := c.u.CPUCounters(); err == nil {
		for _, r := range rows {
			cpu := strconv.Itoa(r.CPU)
			if r.CPU < 0 {
				cpu = "stayed"
			}
			ch <- prometheus.MustNewConstMetric(descCPUPackets, prometheus.CounterValue, float64(r.Packets), cpu)
			ch <- prometheus.MustNewConstMetric(descCPUBytes, prometheus.CounterValue, float64(r.Bytes), cpu)
		}
	}
	if cores, err := c.u.Cores(); err == nil {
		for _, k := range cores {
			cpu := strconv.Itoa(int(k.CPU))
			ch <- prometheus.MustNewConstMetric(descCPULoad, prometheus.GaugeValue, float64(k.Load), cpu)
			ch <- prometheus.MustNewConstMetric(descCPUPinned, prometheus.GaugeValue, float64(k.Pinned), cpu)
			ch <- prometheus.MustNewConstMetric(descCPUFlows, prometheus.GaugeValue, float64(k.Flows), cpu)
		}
	}
	if ev, err := c.u.Events(); err == nil {
		for name, n := range ev {
			ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(n), name)
		}
	}
}

func cpuValue(cpu uint32) float64 {
	switch cpu {
	case ReceivingCPU:
		return -1
	case NotChosen:
		return -2
	}
	return float64(cpu)
}

// CPUString writes an entry's CPU for people: a number, "receiving" or "-".
func CPUString(cpu uint32) string {
	switch cpu {
	case ReceivingCPU:
		return "receiving"
	case NotChosen:
		return "-"
	}
	return strconv.Itoa(int(cpu))
}

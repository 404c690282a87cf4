package switchd

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Prometheus metrics: what nagarectl show says about the per-port budgets,
// read at scrape time (no counters are kept twice). Served with the
// others on Config.MetricsAddr (--metrics-addr), off unless configured.

var (
	descPortDrops = prometheus.NewDesc("nagare_switch_port_drops_total",
		"Packets the fast path dropped, by ingress port and reason (upcall-port-budget: past the port's upcall budget; controller-upcall-budget: controller-action upcalls past what the controllers accept).",
		[]string{"port", "ofport", "reason"}, nil)
	descPortRefused = prometheus.NewDesc("nagare_switch_port_refused_total",
		"What the slow path refused a port, by reason: flows not cached (flow-limit, port-flow-budget, port-mask-budget, mask-limit, install-error) and PACKET_INs not sent (packet-in-limit, packet-in-queue).",
		[]string{"port", "ofport", "reason"}, nil)
	descPortFlows = prometheus.NewDesc("nagare_switch_port_flows", "Cached flows entering on the port.", []string{"port", "ofport"}, nil)
	descPortMasks = prometheus.NewDesc("nagare_switch_port_masks", "Distinct masks the port's cached flows use.", []string{"port", "ofport"}, nil)
	descPortPaced = prometheus.NewDesc("nagare_switch_port_controller_upcall_limit",
		"Controller-action upcalls per second the fast path admits for the port, fed back from what the controllers accept (0: no limit beyond the upcall budget).",
		[]string{"port", "ofport"}, nil)
	descPortMissPaced = prometheus.NewDesc("nagare_switch_port_miss_upcall_limit",
		"Misses per second the fast path admits for the port while its flows are refused for its cache budget, fed back from what the budget takes (0: no limit beyond the upcall budget).",
		[]string{"port", "ofport"}, nil)
	descConnDrops = prometheus.NewDesc("nagare_switch_connection_drops_total",
		"Asynchronous messages an OpenFlow connection was not sent, by reason (packet-in-limit, packet-in-queue, async-queue).",
		[]string{"conn", "peer", "reason"}, nil)
	descConnQueued = prometheus.NewDesc("nagare_switch_connection_queued", "Messages waiting in the connection's send queue.", []string{"conn", "peer"}, nil)
	descFlows      = prometheus.NewDesc("nagare_switch_cached_flows", "Cached flows in the fast path.", nil, nil)
	descMasks      = prometheus.NewDesc("nagare_switch_masks", "Masks the fast path's megaflow search probes.", nil, nil)
)

type switchCollector struct{ s *Switch }

func (c switchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPortDrops, descPortRefused, descPortFlows, descPortMasks, descPortPaced, descPortMissPaced, descConnDrops, descConnQueued, descFlows, descMasks} {
		ch <- d
	}
}

func (c switchCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ch <- prometheus.MustNewConstMetric(descFlows, prometheus.GaugeValue, float64(s.cache.len()))
	ch <- prometheus.MustNewConstMetric(descMasks, prometheus.GaugeValue, float64(s.dp.NumMasks()))
	ports, err := s.portReports()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descPortDrops, err)
	}
	for _, p := range ports {
		no := strconv.FormatUint(uint64(p.OFPort), 10)
		ch <- prometheus.MustNewConstMetric(descPortFlows, prometheus.GaugeValue, float64(p.Flows), p.Name, no)
		ch <- prometheus.MustNewConstMetric(descPortMasks, prometheus.GaugeValue, float64(p.Masks), p.Name, no)
		ch <- prometheus.MustNewConstMetric(descPortPaced, prometheus.GaugeValue, float64(p.ControllerUpcallLimit), p.Name, no)
		ch <- prometheus.MustNewConstMetric(descPortMissPaced, prometheus.GaugeValue, float64(p.MissUpcallLimit), p.Name, no)
		for r, n := range p.Drops {
			ch <- prometheus.MustNewConstMetric(descPortDrops, prometheus.CounterValue, float64(n), p.Name, no, r)
		}
		for r, n := range p.Refused {
			ch <- prometheus.MustNewConstMetric(descPortRefused, prometheus.CounterValue, float64(n), p.Name, no, r)
		}
	}
	for _, cr := range s.connReports() {
		id := strconv.FormatUint(cr.ID, 10)
		ch <- prometheus.MustNewConstMetric(descConnQueued, prometheus.GaugeValue, float64(cr.Queued), id, cr.Peer)
		for r, n := range map[string]uint64{refusedPacketInCap: cr.PacketInRateDrops, refusedPacketInQ: cr.PacketInQueueDrops, "async-queue": cr.AsyncQueueDrops} {
			ch <- prometheus.MustNewConstMetric(descConnDrops, prometheus.CounterValue, float64(n), id, cr.Peer, r)
		}
	}
}

// MetricsAddr is the address /metrics is served on ("" if none).
func (s *Switch) MetricsAddr() string {
	if a := s.metricsAddr.Load(); a != nil {
		return *a
	}
	return ""
}

"""An L2 learning switch for OpenFlow 1.3 on os-ken, nagare's acceptance
controller (pkg/switchd/osken_test.go).

Per datapath it learns source MAC -> ingress port from PACKET_INs. When the
destination of a packet is known it installs a rule

    table 0, priority 100, in_port, eth_src, eth_dst -> output:PORT

(cookie COOKIE, no timeouts) and sends the packet that missed out of the
same port; otherwise it floods the packet. Multicast and broadcast
destinations are always flooded and never get a rule, so they keep coming
to the controller. Every rule it adds is followed by a BARRIER so a
rejected FLOW_MOD shows up in the log next to the packet that caused it.
"""

import logging
import struct

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER
from os_ken.controller.handler import set_ev_cls
from os_ken.ofproto import ofproto_v1_3

COOKIE = 0x6e6167617265  # "nagare"
LEARNED_PRIORITY = 100

LOG = logging.getLogger("l2switch")


def mac_str(b):
    return ":".join("%02x" % x for x in b)


class L2Switch(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tables = {}  # dpid -> {mac: port}
        self.installed = {}  # dpid -> {(in_port, src, dst): out_port}

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev):
        dp = ev.msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        LOG.info("switch %016x connected (n_tables=%d)", dp.id, ev.msg.n_tables)
        self.tables[dp.id] = {}
        self.installed[dp.id] = {}
        # Table-miss: everything without a learned rule goes to us, whole.
        miss = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        dp.send_msg(parser.OFPFlowMod(
            datapath=dp, table_id=0, priority=0, match=parser.OFPMatch(),
            instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, miss)]))
        dp.send_msg(parser.OFPBarrierRequest(dp))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev):
        LOG.debug("barrier reply xid=%d", ev.msg.xid)

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev):
        m = ev.msg
        LOG.error("switch error type=%d code=%d xid=%d data=%s",
                  m.type, m.code, m.xid, bytes(m.data).hex())

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        ofp, parser = dp.ofproto, dp.ofproto_parser
        in_port = msg.match["in_port"]
        data = bytes(msg.data)
        if len(data) < 14:
            LOG.warning("short packet-in (%d bytes) from port %d", len(data), in_port)
            return
        dst, src = data[0:6], data[6:12]
        (ethertype,) = struct.unpack("!H", data[12:14])
        table = self.tables.setdefault(dp.id, {})
        LOG.debug("packet-in dp=%016x port=%d %s -> %s type=%04x reason=%d buffer=%#x len=%d",
                  dp.id, in_port, mac_str(src), mac_str(dst), ethertype,
                  msg.reason, msg.buffer_id, len(data))

        if not src[0] & 1:  # never learn a multicast source
            if table.get(src) != in_port:
                LOG.info("learned %s on port %d", mac_str(src), in_port)
            table[src] = in_port

        out_port = None if dst[0] & 1 else table.get(dst)
        if out_port == in_port:
            return  # would hairpin: drop
        if out_port is None:
            actions = [parser.OFPActionOutput(ofp.OFPP_FLOOD)]
        else:
            actions = [parser.OFPActionOutput(out_port)]
            self.learn_rule(dp, in_port, src, dst, out_port)

        # Send the packet that missed. With a switch buffer the buffer is
        # released; otherwise the bytes go back down.
        buffered = msg.buffer_id != ofp.OFP_NO_BUFFER
        dp.send_msg(parser.OFPPacketOut(
            datapath=dp, buffer_id=msg.buffer_id, in_port=in_port, actions=actions,
            data=None if buffered else data))

    def learn_rule(self, dp, in_port, src, dst, out_port):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        key = (in_port, src, dst)
        installed = self.installed.setdefault(dp.id, {})
        if installed.get(key) == out_port:
            return  # a packet that was already on its way up
        installed[key] = out_port
        LOG.info("rule in_port=%d %s -> %s output:%d", in_port, mac_str(src), mac_str(dst), out_port)
        match = parser.OFPMatch(in_port=in_port, eth_src=mac_str(src), eth_dst=mac_str(dst))
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                             [parser.OFPActionOutput(out_port)])]
        dp.send_msg(parser.OFPFlowMod(
            datapath=dp, cookie=COOKIE, table_id=0, priority=LEARNED_PRIORITY,
            command=ofp.OFPFC_ADD, flags=ofp.OFPFF_SEND_FLOW_REM,
            match=match, instructions=inst))
        dp.send_msg(parser.OFPBarrierRequest(dp))

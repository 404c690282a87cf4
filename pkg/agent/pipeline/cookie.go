package pipeline

import "hash/fnv"

// A flow's cookie says which feature made it and for which object:
//
//	bits 63..56  feature (cookieNode, cookiePod, cookieRemote, cookieService,
//	             cookieAffinity, cookiePolicy, cookiePolicyCut, cookieRedirect,
//	             cookieTracked)
//	bits 55..0   object: FNV-1a of the object's key ("node", the pod's
//	             containerID/ifName, the remote node's name, the
//	             Service's namespace/name), 56 bits
//
// Deleting an object's flows is one FLOW_MOD DELETE over every table with
// the object's bits and objectMask; a restarted agent compares flows by
// cookie and content and leaves the ones that did not change alone.
const (
	cookieNode    uint64 = 0x01 << 56 // node-wide: table defaults, the gateway
	cookiePod     uint64 = 0x02 << 56 // one pod
	cookieRemote  uint64 = 0x03 << 56 // one remote node
	cookieService uint64 = 0x04 << 56 // one Service (namespace/name): its frontends and endpoints
	// cookieAffinity marks the flows the switch learns for one endpoint
	// of one Service port (service_affinity.go); the agent never adds them.
	cookieAffinity uint64 = 0x05 << 56
	// cookiePolicy marks NetworkPolicy flows: a realized rule's (object:
	// its rule ID) or a pod's default deny (networkpolicy.go).
	cookiePolicy uint64 = 0x06 << 56
	// cookiePolicyCut marks the guard flow of one connection a policy
	// cut (networkpolicy_cut.go); the switch removes it when idle.
	cookiePolicyCut uint64 = 0x07 << 56
	// cookieRedirect marks the node-wide transparent-redirect flows
	// (proxyredirect.go); an opted-out pod's flow has the pod's cookie.
	cookieRedirect uint64 = 0x08 << 56
	// cookieTracked marks the two flows that send one address's packets
	// through the full conntrack walk (conntrack_onepass.go).
	cookieTracked uint64 = 0x09 << 56

	objectMask    uint64 = 1<<56 - 1
	cookieFeature uint64 = 0xff << 56
)

func objectID(kind uint64, key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return kind | h.Sum64()&objectMask
}

func podObject(key string) uint64   { return objectID(cookiePod, key) }
func nodeObject(name string) uint64 { return objectID(cookieRemote, name) }
func localObject() uint64           { return objectID(cookieNode, "node") }

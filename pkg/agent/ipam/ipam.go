// Package ipam hands out the addresses of one node's pod subnet and keeps
// them in a bbolt database, so that an address, once an ADD has it, is
// never given to anyone else until it is released — across restarts and
// across a kill -9 at any instant.
//
// On disk (one file per node, mode 0600):
//
//	bucket "meta":        "subnet" → the subnet ("10.77.1.0/24"),
//	                      "next"   → the address after the last one given
//	bucket "allocations": containerID + "\x00" + ifName → JSON Allocation
//	bucket "addresses":   the 4 address bytes → containerID + "\x00" + ifName
//
// Why it is crash-safe: every Allocate is one bbolt read-write transaction
// that writes the allocation and its address index together and is synced
// to disk (bbolt's default) before Allocate returns. A process killed before
// the commit leaves the database as it was (bbolt's copy-on-write pages and
// meta page switch make a commit atomic); killed after, the address is on
// disk and taken. Free addresses are found through the "addresses" index, so
// an address recorded there is never handed out again until Release deletes
// both entries in one transaction.
//
// Addresses are handed out round-robin after the last one given, as
// host-local does, so an address just released is not reused at once (a
// peer's ARP cache or conntrack entry may still name it).
package ipam

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrExhausted is returned (wrapped) when the subnet has no free address.
var ErrExhausted = errors.New("ipam: no free address")

// Allocation is one address given to one container interface.
type Allocation struct {
	ContainerID string     `json:"containerID"`
	IfName      string     `json:"ifName"`
	Pod         string     `json:"pod,omitempty"` // namespace/name, when known
	IP          netip.Addr `json:"ip"`
	Created     time.Time  `json:"created"`
	// Attachment is the agent's own record of the attachment (opaque here).
	Attachment json.RawMessage `json:"attachment,omitempty"`
}

var (
	bucketMeta  = []byte("meta")
	bucketAlloc = []byte("allocations")
	bucketAddr  = []byte("addresses")
	keySubnet   = []byte("subnet")
	keyNext     = []byte("next")
)

// Store is one node's IPAM database.
type Store struct {
	db       *bolt.DB
	subnet   netip.Prefix
	reserved map[netip.Addr]bool
	first    uint32 // first and last usable addresses
	last     uint32
}

// Open opens (or creates) the database at path for subnet. The network
// and broadcast addresses and reserved (the gateway) are never given. A
// database made for another subnet is switched to this one only if none of
// its allocations fall outside it.
func Open(path string, subnet netip.Prefix, reserved ...netip.Addr) (*Store, error) {
	if !subnet.IsValid() || !subnet.Addr().Is4() || subnet.Bits() > 30 {
		return nil, fmt.Errorf("ipam: subnet %v: want an IPv4 prefix of at most /30", subnet)
	}
	subnet = subnet.Masked()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("ipam: %s is locked by another process (is another agent running for this node?)", path)
		}
		return nil, fmt.Errorf("ipam: open %s: %w", path, err)
	}
	base := u32(subnet.Addr())
	size := uint32(1) << (32 - subnet.Bits())
	s := &Store{db: db, subnet: subnet, reserved: map[netip.Addr]bool{}, first: base + 1, last: base + size - 2}
	for _, r := range reserved {
		s.reserved[r] = true
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketAlloc); err != nil {
			return err
		}
		addrs, err := tx.CreateBucketIfNotExists(bucketAddr)
		if err != nil {
			return err
		}
		if old := meta.Get(keySubnet); old != nil && string(old) != subnet.String() {
			var outside []string
			_ = addrs.ForEach(func(k, _ []byte) error {
				if a := netip.AddrFrom4([4]byte(k)); !subnet.Contains(a) {
					outside = append(outside, a.String())
				}
				return nil
			})
			if len(outside) > 0 {
				return fmt.Errorf("ipam: %s was made for subnet %s and still gives %d addresses outside %s (e.g. %s); delete their pods first",
					path, old, len(outside), subnet, outside[0])
			}
		}
		return meta.Put(keySubnet, []byte(subnet.String()))
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

func u32(a netip.Addr) uint32 { b := a.As4(); return binary.BigEndian.Uint32(b[:]) }

func addrOf(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

func allocKey(containerID, ifName string) []byte {
	return []byte(containerID + "\x00" + ifName)
}

// Subnet is the store's subnet.
func (s *Store) Subnet() netip.Prefix { return s.subnet }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Allocate gives containerID's interface an address, or returns the one it
// has (fresh = false). The allocation is on disk when Allocate returns.
func (s *Store) Allocate(containerID, ifName, pod string) (Allocation, bool, error) {
	if containerID == "" || ifName == "" {
		return Allocation{}, false, errors.New("ipam: container id and interface name are required")
	}
	var out Allocation
	fresh := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		allocs, addrs, meta := tx.Bucket(bucketAlloc), tx.Bucket(bucketAddr), tx.Bucket(bucketMeta)
		key := allocKey(containerID, ifName)
		if b := allocs.Get(key); b != nil {
			return json.Unmarshal(b, &out)
		}
		start := s.first
		if b := meta.Get(keyNext); len(b) == 4 {
			if v := binary.BigEndian.Uint32(b); v >= s.first && v <= s.last {
				start = v
			}
		}
		n := s.last - s.first + 1
		for i := uint32(0); i < n; i++ {
			v := s.first + (start-s.first+i)%n
			a := addrOf(v)
			ab := a.As4()
			if s.reserved[a] || addrs.Get(ab[:]) != nil {
				continue
			}
			out = Allocation{ContainerID: containerID, IfName: ifName, Pod: pod, IP: a, Created: time.Now().UTC()}
			b, err := json.Marshal(out)
			if err != nil {
				return err
			}
			if err := allocs.Put(key, b); err != nil {
				return err
			}
			if err := addrs.Put(ab[:], key); err != nil {
				return err
			}
			var nb [4]byte
			next := v + 1
			if next > s.last {
				next = s.first
			}
			binary.BigEndian.PutUint32(nb[:], next)
			fresh = true
			return meta.Put(keyNext, nb[:])
		}
		return fmt.Errorf("%w in %s", ErrExhausted, s.subnet)
	})
	return out, fresh, err
}

// Get returns containerID's interface's allocation.
func (s *Store) Get(containerID, ifName string) (Allocation, bool, error) {
	var out Allocation
	found := false
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketAlloc).Get(allocKey(containerID, ifName))
		if b == nil {
			return nil
		}
		found = true
		return json.Unmarshal(b, &out)
	})
	return out, found, err
}

// SetAttachment stores the agent's record with an allocation.
func (s *Store) SetAttachment(containerID, ifName string, rec []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		allocs := tx.Bucket(bucketAlloc)
		key := allocKey(containerID, ifName)
		b := allocs.Get(key)
		if b == nil {
			return fmt.Errorf("ipam: no allocation for %s/%s", containerID, ifName)
		}
		var a Allocation
		if err := json.Unmarshal(b, &a); err != nil {
			return err
		}
		a.Attachment = append(json.RawMessage{}, rec...)
		nb, err := json.Marshal(a)
		if err != nil {
			return err
		}
		return allocs.Put(key, nb)
	})
}

// Release frees containerID's interface's address. Releasing what is not
// allocated is not an error (false).
func (s *Store) Release(containerID, ifName string) (bool, error) {
	released := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		released, err = release(tx, allocKey(containerID, ifName))
		return err
	})
	return released, err
}

func release(tx *bolt.Tx, key []byte) (bool, error) {
	allocs, addrs := tx.Bucket(bucketAlloc), tx.Bucket(bucketAddr)
	b := allocs.Get(key)
	if b == nil {
		return false, nil
	}
	var a Allocation
	if err := json.Unmarshal(b, &a); err == nil && a.IP.Is4() {
		ab := a.IP.As4()
		if string(addrs.Get(ab[:])) == string(key) {
			if err := addrs.Delete(ab[:]); err != nil {
				return false, err
			}
		}
	}
	return true, allocs.Delete(key)
}

// List returns every allocation.
func (s *Store) List() ([]Allocation, error) {
	var out []Allocation
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAlloc).ForEach(func(k, v []byte) error {
			var a Allocation
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("ipam: allocation %q: %w", k, err)
			}
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// GC releases every allocation keep refuses and returns them.
func (s *Store) GC(keep func(Allocation) bool) ([]Allocation, error) {
	var gone []Allocation
	err := s.db.Update(func(tx *bolt.Tx) error {
		var keys [][]byte
		err := tx.Bucket(bucketAlloc).ForEach(func(k, v []byte) error {
			var a Allocation
			if err := json.Unmarshal(v, &a); err != nil || !keep(a) {
				keys = append(keys, append([]byte{}, k...))
				gone = append(gone, a)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := release(tx, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return gone, nil
}

// Stats returns the addresses in use and how many the subnet can give.
func (s *Store) Stats() (used, total int) {
	total = int(s.last-s.first+1) - len(s.reservedIn())
	_ = s.db.View(func(tx *bolt.Tx) error {
		used = tx.Bucket(bucketAddr).Stats().KeyN
		return nil
	})
	return used, total
}

func (s *Store) reservedIn() []netip.Addr {
	var out []netip.Addr
	for a := range s.reserved {
		if v := u32(a); a.Is4() && v >= s.first && v <= s.last {
			out = append(out, a)
		}
	}
	return out
}

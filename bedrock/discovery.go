package bedrock

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
)

// Discovery timings (docs/bedrock.md#the-go-api).
const (
	AnnounceIntervalTicks = 100 // an add-on announces itself this often
	PeerTimeoutTicks      = 320 // a peer not heard from for this long is gone
)

// AnnounceData is the payload of announce: {version, schemaVersion, meta?}.
type AnnounceData struct {
	Version       string          `json:"version"`
	SchemaVersion int             `json:"schemaVersion"`
	Meta          json.RawMessage `json:"meta,omitempty"`
}

// Peer is an add-on instance heard on the bus. Two instances with the same
// Src and different IIDs are a collision: both are listed.
type Peer struct {
	Src, IID string
	AnnounceData
	LastSeen int64 // tick of its last announce
}

// PeerEvent is a change in the peers: Up (first heard), Gone (silent for
// PeerTimeoutTicks), or Collision (a second instance of a Src).
type PeerEvent struct {
	Op   string // "up", "gone", "collision"
	Peer Peer
}

// Discovery announces this add-on every AnnounceIntervalTicks, answers
// whois, and keeps the peers it hears.
type Discovery struct {
	bus  *Bus
	self AnnounceData

	mu       sync.Mutex
	peers    map[[2]string]*Peer // (src, iid)
	onChange func(PeerEvent)
	stops    []func()
}

// NewDiscovery starts discovery on bus: it announces at once and asks
// everyone to announce (whois), then announces every
// AnnounceIntervalTicks. onChange (optional) runs for every PeerEvent on
// the bus's goroutine.
func NewDiscovery(bus *Bus, self AnnounceData, onChange func(PeerEvent)) *Discovery {
	d := &Discovery{bus: bus, self: self, peers: map[[2]string]*Peer{}, onChange: onChange}
	d.stops = []func(){
		bus.On(TypeAnnounce, d.heard),
		bus.On(TypeWhois, func(e *Envelope) {
			if e.Src == bus.SelfID() {
				d.announce("") // a twin asks: a direct answer to our own id would loop back to us
			} else {
				d.announce(e.Src)
			}
		}),
		bus.Clock().Every(AnnounceIntervalTicks, func() { d.announce("") }),
		bus.Clock().Every(EvictionIntervalTicks, d.sweep),
	}
	d.Whois()
	d.announce("")
	return d
}

// Close stops announcing and listening.
func (d *Discovery) Close() {
	for _, s := range d.stops {
		s()
	}
}

// Whois asks every add-on to announce itself.
func (d *Discovery) Whois() { _, _ = d.bus.Send(SendOptions{Type: TypeWhois}) }

func (d *Discovery) announce(dst string) {
	body, _ := json.Marshal(d.self)
	_, _ = d.bus.Send(SendOptions{Dst: dst, Type: TypeAnnounce, Data: body})
}

func (d *Discovery) heard(e *Envelope) {
	a, err := decodeAnnounce(e.Data)
	if err != nil || e.IID == d.bus.InstanceID() {
		return
	}
	var events []PeerEvent
	d.mu.Lock()
	k := [2]string{e.Src, e.IID}
	p, known := d.peers[k]
	if !known {
		p = &Peer{Src: e.Src, IID: e.IID}
		d.peers[k] = p
	}
	p.AnnounceData, p.LastSeen = a, d.bus.Clock().Now()
	if !known {
		events = append(events, PeerEvent{"up", *p})
		twin := e.Src == d.bus.SelfID() // our own src from another instance
		for ok := range d.peers {
			if ok[0] == e.Src && ok[1] != e.IID { // a twin: same src, another instance
				twin = true
				break
			}
		}
		if twin {
			events = append(events, PeerEvent{"collision", *p})
		}
	}
	f := d.onChange
	d.mu.Unlock()
	if f != nil {
		for _, ev := range events {
			f(ev)
		}
	}
}

func (d *Discovery) sweep() {
	now := d.bus.Clock().Now()
	var events []PeerEvent
	d.mu.Lock()
	for k, p := range d.peers {
		if now-p.LastSeen >= PeerTimeoutTicks {
			delete(d.peers, k)
			events = append(events, PeerEvent{"gone", *p})
		}
	}
	f := d.onChange
	d.mu.Unlock()
	if f != nil {
		for _, ev := range events {
			f(ev)
		}
	}
}

// Peers returns the peers heard, sorted by src then iid.
func (d *Discovery) Peers() []Peer {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]Peer, 0, len(d.peers))
	for _, p := range d.peers {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Peer) int {
		if c := strings.Compare(a.Src, b.Src); c != 0 {
			return c
		}
		return strings.Compare(a.IID, b.IID)
	})
	return out
}

// Collisions returns the srcs heard from more than one instance, this
// one counted for its own src.
func (d *Discovery) Collisions() []string {
	seen := map[string]int{d.bus.SelfID(): 1}
	for _, p := range d.Peers() {
		seen[p.Src]++
	}
	var out []string
	for src, n := range seen {
		if n > 1 {
			out = append(out, src)
		}
	}
	slices.Sort(out)
	return out
}

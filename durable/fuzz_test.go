package durable

import (
	"bytes"
	"testing"
	"time"

	"busbar/seal"
)

// The decoders of device.db's records accept only what the encoders
// write: whatever decodes encodes back to the same bytes.
func FuzzEntry(f *testing.F) {
	id, err := seal.Generate()
	if err != nil {
		f.Fatal(err)
	}
	f.Add((&entry{msg: seal.MessageID{1}, to: id.Public()}).encode())
	f.Add((&entry{msg: seal.MessageID{2}, attempts: 7, due: time.Unix(0, 1e18), to: id.Public()}).encode())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			return
		}
		if got := e.encode(); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

func FuzzMessage(f *testing.F) {
	in, err := seal.NewMessage(seal.KindSync, "home", []byte("hello"), time.Unix(1e9, 0))
	if err != nil {
		f.Fatal(err)
	}
	f.Add((&message{refs: 3, inner: in}).encode())
	in.Kind, in.Body = seal.KindRevoke, nil
	f.Add((&message{refs: 1, inner: in}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMessage(b)
		if err != nil {
			return
		}
		if got := m.encode(); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

func FuzzTokenRecord(f *testing.F) {
	id, err := seal.Generate()
	if err != nil {
		f.Fatal(err)
	}
	m, err := seal.NewGroup(id, "home", "")
	if err != nil {
		f.Fatal(err)
	}
	tok, err := m.Invite(id, time.Hour, time.Unix(1e9, 0))
	if err != nil {
		f.Fatal(err)
	}
	f.Add((&tokenRecord{tok: tok}).encode())
	f.Add((&tokenRecord{tok: tok, used: true, joiner: seal.DeviceID{7}}).encode())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeToken(b)
		if err != nil {
			return
		}
		if got := r.encode(); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

func FuzzPendingRecord(f *testing.F) {
	blob := bytes.Repeat([]byte{0x42}, seal.MinSealedSize)
	f.Add((&pendingManifest{seq: 9, epoch: 4, kind: seal.KindGroupManifest, sender: seal.DeviceID{1}, id: seal.MessageID{2}, blob: blob}).encode())
	f.Add((&pendingManifest{seq: 1, epoch: 1 << 40, kind: seal.KindRevoke, blob: blob}).encode())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodePending(b)
		if err != nil {
			return
		}
		if got := p.encode(); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

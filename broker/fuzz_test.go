package broker

import (
	"context"
	"io"
	"testing"

	"busbar/internal/hotpath"
	"busbar/wire"
)

// FuzzRoute feeds arbitrary frames from an authenticated node to
// dispatch, the path every frame the reader takes in follows: nothing a
// node sends may crash the broker.
func FuzzRoute(f *testing.F) {
	for _, m := range []*wire.Message{
		wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, "1").WithHeader(wire.HeaderTo, "peer"),
		wire.New(wire.TypeEvent, "x").WithHeader(wire.HeaderID, "2"),
		wire.New(wire.TypeRequest, "x").WithHeader(wire.HeaderID, "3").WithHeader(wire.HeaderTo, "peer.bus").WithHeader(wire.HeaderTTL, "100"),
		wire.New(wire.TypeResponse, "x").WithHeader(wire.HeaderReplyTo, "3").WithHeader(wire.HeaderRC, "20"),
		wire.New(wire.TypeRequest, wire.CmdSubscribe).WithHeader(wire.HeaderID, "4").WithBody([]byte("x")),
		wire.New(wire.TypeRequest, wire.CmdHandle).WithHeader(wire.HeaderID, "5").WithBody([]byte("x")),
		wire.New(wire.TypeResponse, wire.CmdReceipt).WithHeader(wire.HeaderReplyTo, "1").WithHeader(wire.HeaderResult, "ACCEPTED"),
		wire.New(wire.TypeRequest, wire.CmdDirectory).WithHeader(wire.HeaderID, "6"),
		wire.New(wire.TypeRequest, wire.CmdAnnounce).WithHeader(wire.HeaderID, "7").WithBody([]byte(`{"service":"svc","version":"1","schemaVersion":2,"meta":{"a":1},"channels":["x"]}`)),
		wire.New(wire.TypeRequest, wire.CmdWhois).WithHeader(wire.HeaderID, "8").WithBody([]byte("svc")),
		wire.New(wire.TypeRequest, wire.CmdWatch).WithHeader(wire.HeaderID, "9"),
		wire.New(wire.TypeRequest, wire.CmdWithdraw).WithHeader(wire.HeaderID, "10").WithBody([]byte("svc")),
		wire.New(wire.TypeRequest, wire.CmdStateSet).WithHeader(wire.HeaderID, "11").WithBody([]byte(`{"ns":"n","key":"k","value":{"v":1},"ver":3}`)),
		wire.New(wire.TypeRequest, wire.CmdStateSet).WithHeader(wire.HeaderID, "12").WithBody([]byte(`{"ns":"n","key":"k","ver":4,"del":true}`)),
		wire.New(wire.TypeRequest, wire.CmdStateOpen).WithHeader(wire.HeaderID, "13").WithBody([]byte(`{"ns":"n","key":"k"}`)),
		wire.New(wire.TypeRequest, wire.CmdStateGet).WithHeader(wire.HeaderID, "14").WithBody([]byte(`{}`)),
		wire.New(wire.TypeRequest, wire.CmdStateWatch).WithHeader(wire.HeaderID, "15").WithBody([]byte(`{"ns":"n"}`)),
		wire.New(wire.TypeRequest, wire.CmdStateUnwatch).WithHeader(wire.HeaderID, "16").WithBody([]byte(`{"ns":"n"}`)),
		wire.New(wire.TypeRequest, wire.CmdDurablePush).WithHeader(wire.HeaderID, "18").WithBody(append([]byte("BBSL\x00\x01"), make([]byte, 1300)...)),
		wire.New(wire.TypeRequest, wire.CmdDurableReceive).WithHeader(wire.HeaderID, "19").WithBody([]byte(`{"device":"aaaa","public":"AAAA","sig":"AAAA"}`)),
		wire.New(wire.TypeRequest, wire.CmdDurableAck).WithHeader(wire.HeaderID, "20").WithBody([]byte("1")),
		wire.New(wire.TypeRequest, wire.CmdDurableInbox).WithHeader(wire.HeaderID, "21").WithBody([]byte(`{"device":"aaaa","public":"AAAA","sig":"AAAA"}`)),
		wire.New(wire.TypeRequest, "x").WithHeader(wire.HeaderID, "17").WithHeader(wire.HeaderTo, "svc"),
	} {
		f.Add(m.ToBytes())
	}
	b, secret := newTestBroker(f, Options{RelayDir: f.TempDir()})
	f.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	// Two nodes: the fuzzer speaks as "fuzz", "peer" subscribes and handles
	// so that routes reach a destination; both drain what they are sent.
	fuzz := join(f, b, secret, "fuzz")
	peer := join(f, b, secret, "peer")
	for _, n := range []*rawNode{fuzz, peer} {
		go func() { _, _ = io.Copy(io.Discard, n.nc) }()
	}
	for _, cmd := range []string{wire.CmdSubscribe, wire.CmdHandle} {
		peer.send(f, wire.New(wire.TypeRequest, cmd).WithHeader(wire.HeaderID, cmd).WithBody([]byte("x")))
	}
	c := b.dir.lookup("fuzz")
	var v hotpath.View
	f.Fuzz(func(t *testing.T, frame []byte) {
		b.dispatch(c, frame, &v)
	})
}

package trueseal

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"busbar/relay"
)

func TestMetricsCountTruesealInboxesApartFromBusbarsAndHoldNoKey(t *testing.T) {
	f := start(t, Options{}, relay.Options{})
	dev := newDevice(t)
	if _, err := f.store.Push(t.Context(), "busbar-device", []byte("own")); err != nil {
		t.Fatal(err)
	}
	p := pushSession(t, f.addr, f.key.Public)
	p.push(dev.Public, []byte("ab"))
	p.push(dev.Public, nil) // Error
	p.expect(Ack)
	p.expect(Error)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(f.srv))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[key] = v
		}
		if strings.Contains(mf.String(), PublicKeyText(dev.Public)) || strings.Contains(mf.String(), DeviceID(dev.Public)) {
			t.Fatalf("%s names the device", mf.GetName())
		}
	}
	for key, want := range map[string]float64{
		"busbar_relay_protocol_blobs{protocol=busbar}":          1,
		"busbar_relay_protocol_blobs{protocol=trueseal}":        1,
		"busbar_relay_protocol_inboxes{protocol=busbar}":        1,
		"busbar_relay_protocol_inboxes{protocol=trueseal}":      1,
		"busbar_relay_protocol_blob_bytes{protocol=trueseal}":   2,
		"busbar_trueseal_pushes_total{result=acked}":            1,
		"busbar_trueseal_pushes_total{result=refused}":          1,
		"busbar_trueseal_sessions{kind=push}":                   1,
		"busbar_trueseal_sessions{kind=receive}":                0,
		"busbar_trueseal_handshakes":                            0,
		"busbar_trueseal_sessions_closed_total{reason=unused}":  0,
		"busbar_trueseal_sessions_closed_total{reason=evicted}": 0,
		"busbar_trueseal_sessions_closed_total{reason=idle}":    0,
		"busbar_trueseal_source_rate_limited_total":             0,
		"busbar_trueseal_source_sessions_refused_total":         0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
}

package auth

// Permissions: each action is granted by its own patterns only.

import "testing"

func TestPermissionsIndependent(t *testing.T) {
	p := Permissions{
		Send:      []Pattern{"orders.>"},
		Subscribe: []Pattern{"audit.*"},
		Handle:    []Pattern{"rpc.billing.*", "rpc.tax"},
	}
	tests := []struct {
		a    Action
		ch   string
		want bool
	}{
		{ActionSend, "orders.created", true},
		{ActionSubscribe, "orders.created", false},
		{ActionPublish, "orders.created", false},
		{ActionRequest, "orders.created", false},
		{ActionSubscribe, "audit.login", true},
		{ActionSend, "audit.login", false},
		{ActionHandle, "rpc.tax", true},
		{ActionHandle, "rpc.billing.charge", true},
		{ActionRequest, "rpc.tax", false},
		{ActionHandle, "rpc.other", false},
		{Action("delete"), "orders.created", false},
		{ActionSend, "orders..x", false},
	}
	for _, tt := range tests {
		if got := p.Allows(tt.a, tt.ch); got != tt.want {
			t.Errorf("Allows(%s, %q) = %v, want %v", tt.a, tt.ch, got, tt.want)
		}
	}

	var none Permissions
	var nilp *Permissions
	all := AllPermissions()
	for _, a := range []Action{ActionSend, ActionRequest, ActionPublish, ActionSubscribe, ActionHandle} {
		if none.Allows(a, "x") || nilp.Allows(a, "x") {
			t.Errorf("empty permissions allow %s", a)
		}
		if !all.Allows(a, "x.y") {
			t.Errorf("AllPermissions does not allow %s", a)
		}
		if all.Allows(a, "bus.x") {
			t.Errorf("AllPermissions allows %s on control channel", a)
		}
	}
}

func TestStatePermissionsIndependent(t *testing.T) {
	p := Permissions{
		Subscribe:  []Pattern{">"},
		StateRead:  []Pattern{"cfg.*"},
		StateWrite: []Pattern{"cfg.app"},
		StateAdmin: []Pattern{"mine.>"},
	}
	tests := []struct {
		a    Action
		ns   string
		want bool
	}{
		{ActionStateRead, "cfg.app", true},
		{ActionStateRead, "billing", false},
		{ActionStateWrite, "cfg.app", true},
		{ActionStateWrite, "cfg.other", false},
		{ActionStateAdmin, "cfg.app", false},
		{ActionStateAdmin, "mine.x", true},
		{ActionStateRead, "mine.x", false},
		{ActionSubscribe, "cfg.app", false}, // a channel action on a namespace
		{Action("state-delete"), "cfg.app", false},
	}
	for _, tt := range tests {
		if got := p.AllowsNamespace(tt.a, tt.ns); got != tt.want {
			t.Errorf("AllowsNamespace(%s, %q) = %v, want %v", tt.a, tt.ns, got, tt.want)
		}
	}
	// A state action on a channel: the lists do not mix.
	if p.Allows(ActionStateRead, "cfg.app") {
		t.Error("Allows(state-read) consulted a state list")
	}

	var none Permissions
	var nilp *Permissions
	all := AllPermissions()
	for _, a := range []Action{ActionStateRead, ActionStateWrite, ActionStateAdmin} {
		if none.AllowsNamespace(a, "x") || nilp.AllowsNamespace(a, "x") {
			t.Errorf("empty permissions allow %s", a)
		}
		for _, ns := range []string{"x", "x.y", "bus.x", "home/lights"} {
			if !all.AllowsNamespace(a, ns) {
				t.Errorf("AllPermissions does not allow %s on %q", a, ns)
			}
		}
	}
}

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

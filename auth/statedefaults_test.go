package auth

// The state lists in a principals file: a principal that names none of
// them (its entry predates them) gets the documented default; one that
// names any is taken as written.

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestLoadStateDefaults(t *testing.T) {
	_, hash := mustSecret(t)
	entry := func(name, perms string) string {
		return `{"name":"` + name + `","secret_hash":"` + hash + `","nodes":["*"],"permissions":` + perms + `}`
	}
	const allChannels = `"send":[">"],"request":[">"],"publish":[">"],"subscribe":[">"],"handle":[">"]`
	file := `{"principals":[` + strings.Join([]string{
		// As Bootstrap wrote it before the state lists existed.
		entry("local", `{`+allChannels+`}`),
		// Restricted to some channels, from the same era.
		entry("sensors", `{"publish":["telemetry.>"],"subscribe":["config.sensors"]}`),
		// Every channel but one: not the bootstrap shape.
		entry("almost", `{"send":[">"],"request":[">"],"publish":[">"],"subscribe":[">"]}`),
		// Every channel, and state denied on purpose: taken as written.
		entry("nostate", `{`+allChannels+`,"state_read":[],"state_write":null}`),
		// One list named, spelt in another case: encoding/json takes it,
		// so it counts as named, and the others are empty.
		entry("shouty", `{`+allChannels+`,"STATE_READ":["cfg.*"]}`),
		// No permissions at all.
		`{"name":"bare","secret_hash":"` + hash + `","nodes":["*"]}`,
	}, ",") + `]}`
	path := writeFile(t, t.TempDir(), PrincipalsFile, file, 0o600)
	st, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	perms := func(name string) Permissions { return st.cur.Load().byName[name].p.Permissions }
	states := []Action{ActionStateRead, ActionStateWrite, ActionStateAdmin}
	tests := []struct {
		name string
		ns   string
		want []bool // read, write, admin
	}{
		{"local", "cfg.app", []bool{true, true, true}},
		{"local", "home/lights", []bool{true, true, true}},
		{"sensors", "cfg.app", []bool{false, false, false}},
		{"sensors", "telemetry.x", []bool{false, false, false}},
		{"almost", "cfg.app", []bool{false, false, false}},
		{"nostate", "cfg.app", []bool{false, false, false}},
		{"shouty", "cfg.app", []bool{true, false, false}},
		{"shouty", "billing", []bool{false, false, false}},
		{"bare", "cfg.app", []bool{false, false, false}},
	}
	for _, tt := range tests {
		p := perms(tt.name)
		for i, a := range states {
			if got := p.AllowsNamespace(a, tt.ns); got != tt.want[i] {
				t.Errorf("%s: AllowsNamespace(%s, %q) = %v, want %v", tt.name, a, tt.ns, got, tt.want[i])
			}
		}
	}

	// One note per defaulted principal, saying what it got.
	notes := st.Notes()
	if len(notes) != 4 {
		t.Fatalf("notes: %q", notes)
	}
	for _, want := range []struct{ name, says string }{
		{"local", "may read, write and administer every namespace"},
		{"sensors", "may not use replicated state"},
		{"almost", "may not use replicated state"},
		{"bare", "may not use replicated state"},
	} {
		if !slices.ContainsFunc(notes, func(n string) bool {
			return strings.Contains(n, `"`+want.name+`"`) && strings.Contains(n, want.says)
		}) {
			t.Errorf("no note that %s %s in %q", want.name, want.says, notes)
		}
	}

	// Reload takes the new file's notes.
	path2 := writeFile(t, t.TempDir(), PrincipalsFile, `{"principals":[`+entry("local", `{`+allChannels+`,"state_read":[">"]}`)+`]}`, 0o600)
	if err := st.Reload(path2); err != nil {
		t.Fatal(err)
	}
	if n := st.Notes(); len(n) != 0 {
		t.Errorf("notes after reloading a current file: %q", n)
	}
	if p := perms("local"); !p.AllowsNamespace(ActionStateRead, "x") || p.AllowsNamespace(ActionStateWrite, "x") {
		t.Errorf("reloaded local: %+v", p)
	}
}

// A principal built in Go with no state lists allows no state, and written
// out and loaded back it still allows none: the file names the lists, so
// the default for old entries cannot apply to it.
func TestStateListsRoundTrip(t *testing.T) {
	_, hash := mustSecret(t)
	p := Principal{Name: "svc", SecretHash: hash, Nodes: []Pattern{"*"}, Permissions: AllPermissions()}
	p.Permissions.StateRead, p.Permissions.StateWrite, p.Permissions.StateAdmin = nil, []Pattern{}, nil
	data, err := json.Marshal(principalsFile{Principals: []Principal{p}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range stateFields {
		if !strings.Contains(string(data), `"`+f+`":`) {
			t.Errorf("%s not written: %s", f, data)
		}
	}
	st, err := Load(writeFile(t, t.TempDir(), PrincipalsFile, string(data), 0o600))
	if err != nil {
		t.Fatal(err)
	}
	if n := st.Notes(); len(n) != 0 {
		t.Errorf("notes: %q", n)
	}
	got := st.cur.Load().byName["svc"].p.Permissions
	for _, a := range []Action{ActionStateRead, ActionStateWrite, ActionStateAdmin} {
		if got.AllowsNamespace(a, "x") {
			t.Errorf("round trip allows %s", a)
		}
	}
	if !got.Allows(ActionSend, "x") {
		t.Error("round trip lost the channel lists")
	}
}

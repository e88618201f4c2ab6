package port

// Whatever bytes a caller sends, the port answers with a reply its callers
// can read: a frame with an rc, never a panic.

import (
	"testing"
)

func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		greetReq, "", "hello", "---\n---\n", "---\ncommand: help\n---\n\"greet\"\n", "---\ncommand: info\n x\n---\n[",
		"---\ncommand: greet\n---\n{\"name\":1}", "---\ncommand: nope\nargs: {\n---\n",
	} {
		f.Add([]byte(s))
	}
	s, err := New(notes())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		r := s.handle(data)
		got, err := decodeReply("fuzz", encodeReply(r))
		if got == nil {
			t.Fatalf("the reply to %q cannot be read: %v", data, err)
		}
		if got.RC != r.RC || string(got.Body) != string(r.Body) || got.Error != oneLine(r.Error) {
			t.Fatalf("reply %+v read back as %+v", r, got)
		}
	})
}

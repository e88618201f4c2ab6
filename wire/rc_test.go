package wire

// Return codes: their bands, application errors apart from transport
// failures, and Validate.

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestRCBands(t *testing.T) {
	if RCSuccess != 0 || RCWarning != 5 || RCError != 10 || RCFailure != 20 {
		t.Fatal("return codes differ from seed 004")
	}
	for rc, isErr := range map[RC]bool{0: false, 5: false, 9: false, 10: true, 20: true, 255: true} {
		if rc.IsError() != isErr {
			t.Errorf("RC(%d).IsError() = %v", rc, rc.IsError())
		}
	}
	for _, s := range []string{"", "-1", "256", "1.0", "x", " 1"} {
		if _, err := ParseRC(s); err == nil {
			t.Errorf("ParseRC(%q) succeeded", s)
		}
	}
	if rc, err := ParseRC("255"); err != nil || rc != 255 {
		t.Errorf("ParseRC(255) = %d, %v", rc, err)
	}
}

func response(rc string) *Message {
	m := New(TypeResponse, "c")
	if rc != "" {
		m.Set(HeaderRC, rc)
	}
	return m
}

func TestReplyKeepsAppErrorApartFromTransport(t *testing.T) {
	cases := []struct {
		name      string
		reply     Reply
		rc        RC
		appErr    *AppError
		transport bool
	}{
		{"no rc is success", NewReply(response(""), nil), RCSuccess, nil, false},
		{"rc 0", NewReply(response("0"), nil), RCSuccess, nil, false},
		{"warning is success", NewReply(response("5"), nil), RCWarning, nil, false},
		{"rc 9 is success", NewReply(response("9"), nil), 9, nil, false},
		{"error text from header", NewReply(response("10").WithHeader(HeaderError, "no such key").WithBody([]byte("ignored")), nil), RCError, &AppError{RCError, "no such key"}, false},
		{"error text from body", NewReply(response("20").WithBody([]byte("disk full")), nil), RCFailure, &AppError{RCFailure, "disk full"}, false},
		{"malformed rc", NewReply(response("abc").WithBody([]byte("?")), nil), RCFailure, &AppError{RCFailure, `malformed rc header "abc": ?`}, false},
		{"transport", NewReply(nil, context.DeadlineExceeded), RCFailure, nil, true},
		{"nil message", NewReply(nil, nil), RCFailure, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.reply.RC() != c.rc {
				t.Fatalf("RC = %d, want %d", c.reply.RC(), c.rc)
			}
			ae := c.reply.AppError()
			if (ae == nil) != (c.appErr == nil) || (ae != nil && *ae != *c.appErr) {
				t.Fatalf("AppError = %+v, want %+v", ae, c.appErr)
			}
			msg, err := c.reply.Result()
			_, isApp := errors.AsType[*AppError](err)
			_, isTransport := errors.AsType[*TransportError](err)
			switch {
			case c.transport:
				if !isTransport || isApp || msg != nil {
					t.Fatalf("Result = %v, %v; want a transport error", msg, err)
				}
			case c.appErr != nil:
				if !isApp || isTransport || msg == nil {
					t.Fatalf("Result = %v, %v; want an app error with the message", msg, err)
				}
			default:
				if err != nil || msg == nil {
					t.Fatalf("Result = %v, %v", msg, err)
				}
			}
		})
	}
	// The cause stays reachable, and wrapping is not doubled.
	_, err := NewReply(nil, context.DeadlineExceeded).Result()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("cause lost")
	}
	_, err2 := NewReply(nil, err).Result()
	if err2 != err {
		t.Fatalf("TransportError wrapped twice: %v", err2)
	}
}

func TestValidate(t *testing.T) {
	clean := Command("noded.ping").WithHeader("bus", "1").WithHeader("id", "1").WithHeader("from", "a").
		WithHeader("to", "b").WithHeader("args", `{"a":1}`).WithHeader("json", "[]").WithHeader("reply-to", "0").
		WithHeader("ttl", "4294967295").WithHeader("error", "x").WithHeader("result", "ACCEPTED").WithHeader("timestamp", "2026-11-29T00:00:00Z").WithHeader("rc", "255")
	if w := Validate(clean); len(w) != 0 {
		t.Fatalf("clean message warned: %v", w)
	}
	for _, typ := range ValidTypes() {
		if w := Validate(New(typ, "c")); len(w) != 0 {
			t.Fatalf("type %q warned: %v", typ, w)
		}
	}
	cases := []struct {
		k, v string
	}{
		{"x-custom", "1"},
		{"Type", "event"},
		{"type", "notify"},
		{"type", ""},
		{"args", "not json"},
		{"args", ""},
		{"json", "{"},
		{"rc", "256"},
		{"rc", "-1"},
		{"rc", "ten"},
		{"ttl", "4294967296"},
		{"ttl", "1h"},
	}
	for _, c := range cases {
		w := Validate(Empty().WithHeader(c.k, c.v))
		if len(w) != 1 || w[0].Header != c.k {
			t.Errorf("Validate(%s: %q) = %v, want one warning", c.k, c.v, w)
		}
	}
	if !slices.IsSorted(CoreHeaders()) || len(CoreHeaders()) != 13 || !IsCoreHeader("reply-to") || IsCoreHeader("x") {
		t.Fatal("CoreHeaders must be the 13 core headers, sorted")
	}
}

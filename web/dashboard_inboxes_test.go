package web_test

// The dashboard's "Durable inboxes" table in headless Chromium: the relay
// store's inboxes split by protocol (busbar's own, trueseal's), updated
// live, and no device id or key on the page.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"busbar/broker"
	"busbar/edge/trueseal"
	"busbar/internal/testbroker"
)

func TestDashboardShowsDurableInboxesByProtocol(t *testing.T) {
	exe := chromium(t)
	e := testbroker.Start(t, "tcp", broker.Options{RelayDir: t.TempDir()})
	store := e.Broker.RelayStore()
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i + 1)
	}
	tsDevice := trueseal.DeviceID(key)
	const busbarDevice = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" // a busbar device id: 32 base32 characters
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, p := range []struct{ device, blob string }{{tsDevice, "sealed"}, {busbarDevice, "twelve bytes"}, {busbarDevice, "more"}} {
		if _, err := store.Push(ctx, p.device, []byte(p.blob)); err != nil {
			t.Fatal(err)
		}
	}
	base := serveOps(t, e.Broker)
	tctx := browserTab(t, exe, chromedp.WindowSize(1200, 900))
	rows := func() (string, error) {
		return chromedp.Run(tctx, chromedp.Evaluate[string](
			`[...document.querySelectorAll("#inboxes tbody tr")].map(r => [...r.cells].map(c => c.textContent).join("|")).join("\n")`))
	}
	await := func(what, want string) {
		t.Helper()
		testbroker.Await(t, 20*time.Second, what, func() error {
			got, err := rows()
			if err != nil {
				return err
			}
			if got != want {
				return errors.New("the table shows " + got)
			}
			return nil
		})
	}
	if _, err := chromedp.Run(tctx, chromedp.Navigate(base+"/?token="+dashToken)); err != nil {
		t.Fatal(err)
	}
	await("the inboxes by protocol", "busbar|1|2|16\ntrueseal|1|1|6")
	if _, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`window.loadedOnce = true`)); err != nil {
		t.Fatal(err)
	}
	// A second trueseal inbox fills: the table follows live, no reload.
	other := append([]byte(nil), key...)
	other[0] = 0xff
	if _, err := store.Push(ctx, trueseal.DeviceID(other), []byte("sealed again")); err != nil {
		t.Fatal(err)
	}
	await("the new trueseal inbox", "busbar|1|2|16\ntrueseal|2|2|18")
	if again, err := chromedp.Run(tctx, chromedp.Evaluate[bool](`window.loadedOnce === true`)); err != nil || !again {
		t.Fatalf("the page reloaded: %v %v", again, err)
	}
	body, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.body.innerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	for what, s := range map[string]string{"a trueseal inbox id": tsDevice, "a trueseal key": trueseal.PublicKeyText(key), "a busbar device id": busbarDevice, "a blob": "sealed"} {
		if strings.Contains(body, s) {
			t.Errorf("the dashboard shows %s", what)
		}
	}
}

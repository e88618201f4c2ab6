package ops_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"busbar/broker"
	"busbar/ops"
)

// Register puts the operator's endpoints on a mux; busbar serve does this
// on its HTTP listener with the token of its data directory.
func ExampleRegister() {
	b, err := broker.New(broker.Options{})
	if err != nil {
		panic(err)
	}
	defer b.Shutdown(context.Background())
	const token = "an-example-token-of-at-least-32-characters"
	mux := http.NewServeMux()
	ops.Register(mux, ops.Options{Broker: b, Token: token})

	for _, auth := range []string{"", "Bearer " + token} {
		req := httptest.NewRequest("GET", ops.ReadyPath, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(rec.Code, strings.Fields(rec.Body.String())[0])
	}
	// Output:
	// 401 busbar:
	// 200 ready
}

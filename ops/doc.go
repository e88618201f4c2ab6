// Package ops is what an operator reads from a running broker over HTTP:
// Prometheus metrics (/metrics), liveness (/healthz), readiness (/readyz),
// a JSON status of the bus (/api/status) and a dashboard page (/) that
// shows it live. Everything but /healthz needs the token `busbar serve`
// keeps in its data directory. The figures are read from the broker when
// they are asked for, so an idle endpoint costs the routing path nothing.
// docs/operations.md lists the metrics.
package ops

// Package ops is what an operator reads from a running broker over HTTP:
// Prometheus metrics (/metrics), liveness (/healthz), readiness (/readyz),
// a JSON status of the bus (/api/status) and a dashboard page (/) that
// the broker keeps live over a WebSocket feed (/api/live). Everything but
// /healthz needs the token `busbar serve` keeps in its data directory.
// The figures are read from the broker when they are asked for; the
// per-message counters they include are kept by the broker's routing path
// at a cost of its own (docs/operations.md#per-message-metrics).
// docs/operations.md lists the metrics.
package ops

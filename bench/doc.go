// Command bench runs busbar and NATS side by side on this machine and
// prints the ratio busbar / NATS for each workload (issue 4):
//
//	go run -C bench . [-rounds 3] [-quick] [-json results/latest.json]
//
// Each server runs in its own child process (this binary re-executed in a
// server role), so its memory can be measured and the clients share no heap
// with it. Clients are the official ones: nats.go and busbar/client. Load
// stays on loopback and every run is bounded. Workloads 9 to 11 run across
// a bus (cluster.go): two `busbar serve --nats` children on a cluster of
// three nats-server children, against nats.go on the same cluster.
//
// This is its own module so the main module does not depend on NATS.
package main

package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpPage is the help of one command: a verb ("pub") or a subcommand
// ("state set"). `busbar PATH --help` and `busbar help PATH` print it.
type helpPage struct {
	path    string // "pub", "state set"
	args    string // the positional part of the usage line
	summary string // one line, for the lists
	text    string // what it does, its arguments, what its output means
	exit    string // exit statuses; "" inherits the parent command's
	example string // one or two "$ busbar …" lines, with output
}

// Exit statuses every command shares, and those of the client verbs.
const (
	exitCommon = `0  done
1  the command ran and the answer is "no", or it failed (no broker, refused login)
2  usage: a bad argument, flag or input (nothing was sent)`
	exitCall = exitCommon + `
3  NO_HANDLER: nobody handles it (or the target is not connected)
4  OVERLOAD: the broker or the handler had no room
5  TIMEOUT: no answer within --timeout
6  DISCONNECT: the connection went while waiting
7  REJECTED: not permitted, or refused (also AMBIGUOUS: a bare name several instances announce)`
	connNote = `With ` + "`busbar serve`" + ` running on its defaults, no flag is needed: the
client finds its socket and credentials in the data directory.`
)

// helpPages lists every command in the order `busbar help` shows them; a
// parent's subcommands follow it.
var helpPages = []helpPage{
	{path: "serve", summary: "run the broker (data ~/.local/state/busbar, a unix socket, tcp 127.0.0.1:7474)",
		text: `Runs the broker until SIGINT or SIGTERM, then stops gracefully. The first
start creates the data directory (0700), a principal allowed everything
(principals.json) and the matching credentials.json for clients of this OS
user; it prints their paths. Each endpoint it listens on is printed as
"busbar: listening on URL"; logs go to stderr.

Only one broker may use a data directory at a time. A port already in use
is refused: pick another with --tcp 127.0.0.1:0 (a free port, printed) or
turn TCP off with --tcp off.`,
		exit: `0  stopped cleanly after a signal
1  could not start (data directory in use, port in use, bad principals) or the stop was not clean
2  usage: a bad flag or value`,
		example: `$ busbar serve
$ busbar serve --data /tmp/b2 --tcp 127.0.0.1:0 --log-level debug`},

	{path: "pub", args: "CHANNEL [PAYLOAD|-]", summary: "publish an event to a channel's subscribers: one line per candidate node",
		text: `Publishes an event on CHANNEL and prints, one line each and sorted by node,
what became of it at every candidate node (every connected node permitted
to receive CHANNEL, the broker included): "NODE RESULT", where RESULT is
  ACCEPTED       queued for the node's subscriber
  NO_SUBSCRIBER  the node has no subscription to CHANNEL
  BACKPRESSURED  a queue on the way to the node was full: not delivered
  TIMED_OUT      the node did not answer before --timeout
  NOT_CONNECTED  the node left before the event reached it
  REJECTED       the node may not receive on CHANNEL
  FAILED         unknown, e.g. the node left before answering
The publisher's own line only with --verbose; on a terminal a summary line
follows (accepted by N of M nodes). PAYLOAD is the event's body (- reads
it from stdin; none: empty).

` + connNote,
		exit: `0  at least one node accepted the event
1  no node accepted it (nobody listens, or every candidate refused or timed
   out), or it failed (no broker, refused login)
2  usage: a bad argument, flag or input (nothing was sent)
4, 5, 7  the broker refused the whole publication, as for req (OVERLOAD,
   TIMEOUT, REJECTED)`,
		example: "$ busbar pub news hello\ncli-4242 ACCEPTED"},

	{path: "sub", args: "CHANNEL|PATTERN", summary: "print the events received on a channel",
		text: `Subscribes to CHANNEL, or to a pattern ('orders.*': one token, 'orders.>':
one or more; quote it for the shell), and prints each event's payload on a
line of its own, quoted when it spans lines or is not text, after its
channel for a pattern (--raw: the bytes as they are; --json: the whole
message as one JSON object a line). It runs until interrupted, --count
events, or --timeout if given (a subscription has no deadline otherwise).
It survives its broker: a lost connection is said on stderr and retried
until the subscription is back (what was published meanwhile is not
delivered later).

` + connNote,
		exit: `0  interrupted, --count events received, or --timeout passed without --count
1  --timeout passed before --count events arrived, or it failed (no broker,
   refused login)
2  usage: a bad argument, flag or pattern (nothing was sent)
7  REJECTED: the broker refused the subscription (not permitted)`,
		example: "$ busbar sub news --count 1\nhello"},

	{path: "send", args: "TARGET CHANNEL [PAYLOAD|-]", summary: "send an event to one node and print its receipt",
		text: `Sends an event on CHANNEL to TARGET (a node, service.node, or a service
name the registry resolves) and prints the receipt on stdout:
"RESULT id=ID node=NODE [reason=...]", RESULT being ACCEPTED (queued for the
node's subscriber), NO_SUBSCRIBER, NOT_CONNECTED (no node of that name),
BACKPRESSURED (a queue on the way was full), REJECTED, TIMED_OUT or FAILED.
PAYLOAD: - reads stdin; none: empty.`,
		exit: `0  ACCEPTED
1  any other receipt (printed on stdout), or no connection
2  usage: a bad argument, channel, target or flag (nothing was sent)`,
		example: "$ busbar send cli-4242 news hi\nACCEPTED id=5f0c… node=cli-4242.bus"},

	{path: "req", args: "TARGET CHANNEL [PAYLOAD|-]", summary: "send a request and print the reply",
		text: `Sends a request on CHANNEL to TARGET's handler (a node, service.node, or a
service name) and prints the reply's body on stdout (with a newline after
it on a terminal). The error of a failed request goes to stderr, with the
rc the reply carried; the exit status says which kind it was.
PAYLOAD: - reads stdin; none: empty.`,
		exit: exitCall + `
8  HANDLER_FAILED: the handler answered with an error`,
		example: "$ busbar req upper math shout\nSHOUT"},

	{path: "reply", args: "CHANNEL (--echo | --exec CMD)", summary: "answer requests on a channel (--echo, or --exec CMD per request)",
		text: `Handles requests on CHANNEL until interrupted (or --count of them): with
--echo each reply is the request's payload; with --exec CMD, "sh -c CMD"
runs per request with the payload on stdin, and its stdout is the reply. A
non-zero exit fails the request (HANDLER_FAILED, rc 10, its stderr as the
error text). --service NAME also announces a service, so "busbar req NAME"
finds it by name. It reconnects like sub.`,
		exit:    exitCommon,
		example: "$ busbar reply math --exec 'tr a-z A-Z' --name upper"},

	{path: "ls", summary: "list nodes with their leases, subscriptions and handlers (--services: the registry)",
		text: `Prints the broker's directory: one row per node with its broker, epoch,
lease left, subscriptions and handlers. --services prints the service
registry instead; --watch prints the registry and then each change (it
reconnects like sub). --json: JSON (with --watch one object a line).`,
		exit:    exitCommon,
		example: "$ busbar ls\n$ busbar ls --services --json"},
	{path: "tap", args: "[CHANNEL-PATTERN...]", summary: "print the traffic the broker routes (needs the tap permission)",
		text: `Prints every message the broker routes, or those on channels matching the
patterns (orders.*, orders.>, myplugin:*) and, with --node, from or to those
nodes: one line each with kind, id, from, to, channel, size, headers and a
preview of the body (--json: one object a line). The principal needs the
tap permission, and sees only what it could have received itself; a tapper
that reads too slowly misses copies, counted and reported on the next line
(docs/operations.md#busbar-tap). Like sub, it survives a lost connection:
it says so on stderr, reconnects and taps again.`,
		exit:    exitCommon,
		example: "$ busbar tap 'orders.>'\n$ busbar tap --node billing --json --count 10"},

	{path: "status", summary: "the broker's readiness and figures in one screen (exit 1 when not ready)",
		text: `Prints the local broker's readiness, version, uptime, connections, queued
messages, drops by reason and durable relay inboxes, from its status API
(docs/operations.md#the-status-api): over the broker's HTTP socket in its
data directory, with the token there, so the owner needs nothing more.
--http names another HTTP listener (with --token-file, the token its
broker keeps in <data>/http-token). --json prints the same as one JSON
object. The exit status says whether the broker is ready, for scripts and
systemd checks.`,
		exit:    "0  the broker is ready\n1  it is not ready (the reason is printed), or could not be asked\n2  usage: a bad flag or value",
		example: "$ busbar status\n$ busbar status --json\n$ busbar status --http https://bus.example:7475 --token-file ./http-token"},

	{path: "state", summary: "replicated state: get, set, del, open, dump, watch, drop, owner",
		text: `Reads and writes the broker's replicated, namespaced key-value state
(docs/state.md). Every entry prints as one JSON object a line:
{"k":KEY,"v":VALUE,"ver":VERSION,"src":WRITER} (the protocol's field names).
The CLI writes as its principal's name (local for the broker's own
credentials), so a namespace it creates outlives the process.`,
		exit: exitCommon + `
3-7  as for req, when the broker refuses (7: REJECTED, e.g. not permitted)`,
		example: "$ busbar state set home target 20.5\n{\"k\":\"target\",\"v\":20.5,\"ver\":1,\"src\":\"local\"}"},
	{path: "state get", args: "NS KEY", summary: "print one entry",
		text: "Prints the entry KEY of namespace NS; a missing key exits 1.", example: "$ busbar state get home target"},
	{path: "state set", args: "NS KEY VALUE", summary: "write an entry (VALUE is JSON)",
		text: "Writes KEY in NS and prints the entry as written. VALUE is JSON; a value that\nis not JSON is refused (exit 2) unless --string stores it as text.", example: "$ busbar state set home target 20.5\n$ busbar state set home label 'living room' --string"},
	{path: "state del", args: "NS KEY", summary: "delete an entry",
		text: "Deletes KEY in NS and prints the tombstone.", example: "$ busbar state del home target"},
	{path: "state open", args: "NS KEY", summary: "open an entry (the first writer wins)",
		text: "Claims KEY in NS if nobody holds it, and prints the entry.", example: "$ busbar state open home lock"},
	{path: "state dump", args: "[NS]", summary: "print a namespace (without NS: all of them)",
		text: "Prints the snapshot of NS, or of every namespace, as JSON.", example: "$ busbar state dump home"},
	{path: "state watch", args: "NS", summary: "print the entries, then each change",
		text: "Prints NS's entries, then one line per change until interrupted; it reconnects like sub.", example: "$ busbar state watch home"},
	{path: "state drop", args: "NS", summary: "delete a whole namespace (state_admin)",
		text: `Deletes namespace NS with every entry, whoever owns it; watchers are told
to resync. Needs the state_admin permission on NS. On a bus of brokers
every broker drops it (docs/cluster.md#dropping-a-namespace-and-giving-it-a-new-owner).`, example: "$ busbar state drop home"},
	{path: "state owner", args: "NS NODE", summary: "give a namespace to another owner (state_admin)",
		text: `Makes NODE the owner of namespace NS, whoever owns it now (say, a
cli-<pid> long gone). Needs the state_admin permission on NS. On a bus of
brokers every broker takes the new owner (docs/state.md#administration).`, example: "$ busbar state owner home thermostat"},

	{path: "principal", summary: "the broker's principals: add, list, remove (edits principals.json)",
		text: `Edits the broker's principals file (--principals, else
<data>/principals.json): checked before and after the change, written
atomically, other entries untouched. add and remove have the broker
running on the data directory reload it before they return (over its
owner-only HTTP socket), without dropping connections, and say so; after
an edit by hand, SIGHUP does the same.`,
		exit:    "0  done (and the running broker, if any, took it)\n1  the file could not be read or written, NAME does not exist, or a running\n   broker refused the file or could not be told (send it SIGHUP)\n2  usage",
		example: "$ busbar principal add sensor --nodes 'sensor-*' --publish 'metrics.>' --out sensor.json"},
	{path: "principal add", args: "NAME", summary: "add a principal and print its credentials file",
		text: `Adds principal NAME with a fresh secret and the permissions the flags give,
and prints the credentials file a client presents (or writes it, 0600, with
--out).`, example: "$ busbar principal add sensor --nodes 'sensor-*' --publish 'metrics.>'"},
	{path: "principal list", summary: "list the principals and their permissions",
		text: "Prints one principal a line (--json: a JSON array); secrets are never shown.", example: "$ busbar principal list"},
	{path: "principal remove", args: "NAME", summary: "remove a principal",
		text: "Removes principal NAME. The running broker refuses its new logins once remove\nreturns; connections already open keep going until they end (a reload drops no connection).", example: "$ busbar principal remove sensor"},

	{path: "bench", summary: "generate load on a running broker and measure it: pub, sub, pubsub, req",
		text: `Load generators in the spirit of nats bench. Every run is bounded by
--msgs and --duration (at most 10m) and stops by itself. Publishers write
the send time in the payload, so latency is measured per message. The
table has one row per role: messages, seconds, rate, errors and latency
percentiles in µs (--json, --csv for scripts).`,
		exit:    "0  the run completed\n1  an operation failed (the first failure is named on stderr), a subscriber\n   received fewer messages than were sent (or, for sub, than --msgs), or\n   the run could not start\n2  usage",
		example: "$ busbar bench pubsub --subs 2 --msgs 20000\n$ busbar bench req --clients 2 --concurrency 8"},
	{path: "bench pub", args: "[CHANNEL]", summary: "publishers emit stream messages (fire and forget)",
		text: "--clients publishers send --msgs messages of --size bytes on CHANNEL (default bench).", example: "$ busbar bench pub --msgs 50000"},
	{path: "bench sub", args: "[CHANNEL]", summary: "one subscriber counts and times what arrives",
		text: "Waits for the first message, then reports after --msgs messages or 2 s of silence.\nFewer than --msgs messages is a shortfall: it is named on stderr and the exit status is 1.", example: "$ busbar bench sub"},
	{path: "bench pubsub", args: "[CHANNEL]", summary: "--subs subscribers, then the publishers, in one command",
		text: "Starts --subs subscribers, then --clients publishers, and reports both sides.\nA subscriber that received fewer messages than were sent is named on stderr\nand the exit status is 1: a stream is best effort, and a lossy run must not\nread as a clean one.", example: "$ busbar bench pubsub --subs 4"},
	{path: "bench req", args: "[CHANNEL]", summary: "requesters against --target's handler, or an echo replier it starts",
		text: "--clients × --concurrency requests in flight; each round trip is timed.", example: "$ busbar bench req --concurrency 8"},

	{path: "bedrock", summary: "join a bedrock add-on world on stdin/stdout to the broker",
		text: `The bedrock bus over a size-capped broadcast medium, bridged to busbar
(docs/bedrock.md). stdout is the medium; logs go to stderr.`,
		exit:    exitCommon,
		example: "$ busbar bedrock bridge --medium stdio --export-state home"},
	{path: "bedrock bridge", summary: "run the bridge until the medium closes or a signal",
		text:    "Reads the medium's lines on stdin, writes them on stdout, and joins them to the broker.",
		example: "$ busbar bedrock bridge --medium stdio --export-events news"},

	{path: "group", summary: "durable groups of this device: create, invite, join, show, leave, revoke",
		text: `A device's groups for durable delivery (docs/durable.md). The device is
the directory --device, else $BUSBAR_DEVICE, else <data>/device. join,
leave and revoke write to the outbox, then push it once: an unreachable
relay leaves the change queued (stderr says so; exit 0).`,
		exit:    "0  done\n1  the device or the group refused (no device, no such group, a locked device.db)\n2  usage: an invalid group name, label, token, device id or --ttl",
		example: "$ busbar group create home --label laptop\n$ busbar group invite home --ttl 1h > token.txt"},
	{path: "group create", args: "NAME", summary: "start a group with this device its only member",
		text: "Starts group NAME (epoch 1); makes the device if the directory has none.", example: "$ busbar group create home"},
	{path: "group invite", args: "NAME", summary: "print an invitation token for one device to join NAME",
		text: "Prints a one-line token (busbar-invite:…) on stdout, valid for --ttl.", example: "$ busbar group invite home > token.txt"},
	{path: "group join", args: "TOKEN|-", summary: "ask to join with a token",
		text: "Queues a Pair to the inviter and pushes it; - reads the token on stdin.", example: "$ busbar group join - --device ~/phone < token.txt"},
	{path: "group show", args: "NAME", summary: "print the members and the epoch of NAME",
		text: "One row per member (device id, label); a pending join says so.", example: "$ busbar group show home --json"},
	{path: "group leave", args: "NAME", summary: "leave NAME; the last member deletes it",
		text: "Tells the other members through the relay.", example: "$ busbar group leave home"},
	{path: "group revoke", args: "NAME DEVICE", summary: "remove DEVICE from NAME",
		text: "Removes the device (its id) and tells it and the members.", example: "$ busbar group revoke home hgvihxujug6l3e2jdu2yyiqfcpnwjasm"},

	{path: "port", summary: "cosmix-style ports: serve, call, ls",
		text: `Small Unix-socket command servers, one request per connection
(docs/ports.md), in $BUSBAR_PORTS, else $XDG_RUNTIME_DIR/busbar/ports.`,
		exit:    exitCommon,
		example: "$ busbar port call notes count"},
	{path: "port serve", args: "NAME --exec CMD", summary: "serve port NAME, running CMD per command",
		text: `Serves NAME until interrupted. Each command runs "sh -c CMD" with the
command in $BUSBAR_PORT_COMMAND and its JSON arguments on stdin; stdout is
the reply. Exit 0 is rc 0, 5 a warning, any other an error.`,
		example: "$ busbar port serve notes --exec 'echo 3' --command count=\"Count the notes\""},
	{path: "port call", args: "NAME|PATH COMMAND [ARGS|-]", summary: "call a port and print the reply body",
		text: "ARGS is JSON (- reads stdin). The exit status is the floor of the reply's rc band.",
		exit: `0   rc 0-4: success
5   rc 5-9: a warning (its text on stderr)
10  rc 10-19: an application error
20  rc 20 or more: a severe failure
1   no reply: no such port, the connection failed, the deadline passed
2   usage: bad arguments, ARGS not JSON, a bad port name`,
		example: "$ busbar port call notes count\n{\"notes\":3}"},
	{path: "port ls", summary: "list the ports with what their info answers",
		text: "One row per socket in both directories (--json: one array).", example: "$ busbar port ls"},

	{path: "frame", summary: "parse or validate a text frame read on stdin",
		text:    "Tools for the cosmix text frame (docs/protocol.md): parse prints it as JSON, validate lists its defects.",
		exit:    "0  a frame without defects\n1  defects found (validate, parse --strict), or not a frame (parse)\n2  usage, or not a frame (validate)",
		example: "$ printf -- '---\\ntype: event\\n---\\nhi' | busbar frame parse"},
	{path: "frame parse", summary: "print a frame read on stdin as JSON",
		text: `Prints {"headers":{…},"body":"…","report":[…]}: the headers kept, the body,
and one string per defect. Lenient by default; --strict refuses a defect.`,
		example: "$ printf -- '---\\ntype: event\\n---\\nhi' | busbar frame parse\n{\"headers\":{\"type\":\"event\"},\"body\":\"hi\",\"report\":[]}"},
	{path: "frame validate", summary: "print a frame's defects and warnings, one a line",
		text:    "Parse defects first (prefixed parse:), then unknown headers and bad values.",
		example: "$ printf -- '---\\nx-trace: 1\\n---\\n' | busbar frame validate\nx-trace: unknown header"},

	{path: "addr", args: "ADDRESS", summary: "parse a bus address or target and print it as JSON",
		text: `Prints {"sub","service","node","display"} (absent parts are empty); a
cross-mesh target prints {"cross_mesh","local","mesh"}.`,
		exit:    "0  a valid address\n2  an invalid address",
		example: "$ busbar addr noded.alpha\n{\"sub\":\"\",\"service\":\"noded\",\"node\":\"alpha\",\"display\":\"noded.alpha.bus\"}"},

	{path: "id", summary: "this device's identity for durable delivery: init, show",
		text:    "The device's keys live in --device, else $BUSBAR_DEVICE, else <data>/device.",
		exit:    "0  done\n1  no device, or it could not be read or made\n2  usage",
		example: "$ busbar id init"},
	{path: "id init", summary: "make the device and print its id",
		text: "A directory that already holds a device is kept (stderr says so).", example: "$ busbar id init --device ~/phone"},
	{path: "id show", summary: "print the device's id (--json: id, dir, public, groups)",
		text: "Prints the id, or with --json one object.", example: "$ busbar id show --json"},

	{path: "durable", summary: "durable, end-to-end-sealed delivery: send, listen, status, events",
		text: `What a device sends reaches every other member of the group at least
once, in its order, sealed to each, across crashes (docs/durable.md).`,
		exit:    "0  done\n1  no device, no such group, a failure\n2  usage\n7  a send the device refused (not a member, payload over 61,440 bytes)",
		example: "$ busbar durable send home hello\n$ busbar durable listen home"},
	{path: "durable send", args: "GROUP [BODY|-]", summary: "queue a message for the group and push it",
		text: `Prints the message's id once it is in the outbox (fsynced): from then on it
is delivered, whatever happens to this process. It then pushes what the
device has queued, once. When the relay cannot be reached (or refuses for
now), stderr says the message stays queued: a running ` + "`busbar durable listen`" + `
of this device pushes it as soon as it reaches the relay (within about
0.2 s of the send, or at once when its connection comes back), otherwise
the next send or listen of the device does.`,
		example: "$ busbar durable send home hello"},
	{path: "durable listen", args: "GROUP", summary: "the device's long-running process: receive, push, report, until interrupted",
		text: `The device's long-running process. It receives the device's messages, one
line each on stdout: ID SENDER BODY (--json: one object; --exec CMD runs
CMD per message instead, the body on its stdin, a non-zero exit being a
handler failure: retried, 5 attempts in all, then dropped with
handlerGaveUp). It pushes the device's outbox: at once, whenever another
process of the device queues a message, and every queued entry at once
when the connection comes back. It prints each delivery event as it is
raised (sendFailed, heldForUpgrade, unreadable, deliveryIssue,
handlerGaveUp), on stderr as "busbar durable listen: KIND message ID
...", with --json as one object a line on stdout with a "kind" field;
events raised while no listener ran are printed when one starts.

It survives its broker: when the connection is lost it says "connection
lost (...); reconnecting" on stderr, reconnects for ever with backoff,
says "reconnected to ...", and goes on with a new receive session and its
sender. Started before its broker, it waits for one. One listener
receives for a device at a time: a newer listen of the same device takes
the receive session over, and the older one says so and exits (status 9).
--count N ends it after N messages were handled or given up.`,
		exit: `0  interrupted (SIGINT, SIGTERM), or --count messages handled or given up
1  a failure it cannot recover from: no device or group, the device's
   store unreadable, the credentials refused, the relay refusing the
   receive session (this broker is no relay, or not permitted)
2  usage
9  a newer listener of the same device took over the receive session
10 relayVersionUnsupported: the relay speaks no protocol version of this
   busbar's; the outbox stays queued until one of them is upgraded`,
		example: "$ busbar durable listen home --count 1\n$ busbar durable listen home --exec 'cat >> inbox.txt'"},
	{path: "durable status", summary: "the outbox, held blobs, the relay's inbox and delivery events",
		text: `The outbox depth, the blobs held for an upgrade, the manifests kept until
their signer is known, the relay's inbox for this device (or
relayVersionUnsupported with the versions the relay speaks), and the
buffered delivery events. Reading them does not remove them: ` + "`busbar\ndurable events --ack`" + ` does.`,
		example: "$ busbar durable status --json"},
	{path: "durable events", summary: "the buffered delivery events (--follow: then each as it is raised)",
		text: `Prints the device's buffered delivery events, oldest first, one a line:
TIME KIND [message ID] [group G] [peer P] [reason R] [version V][: ERROR]
(--json: one object a line, with a "kind" field). They stay buffered
(the newest 1,000) unless --ack removes those printed. --follow then
prints each new event as any process of the device raises it, until
interrupted. It needs no broker.`,
		exit:    "0  done, or interrupted while following\n1  no device, or its store could not be read\n2  usage",
		example: "$ busbar durable events --follow --json"},

	{path: "trueseal", summary: "the trueseal relay of `busbar serve --trueseal ADDR`: its key",
		text: `busbar serve --trueseal ADDR is a relay for trueseal's own clients
(trueseal-sync and its bindings), storing into the broker's relay store
(docs/trueseal.md).`,
		example: "$ busbar trueseal key"},
	{path: "trueseal key", summary: "print the trueseal relay's public key, as trueseal clients are configured with it",
		text: `Prints the relay's X25519 static public key in hex (64 digits), the
relay key a trueseal app is built with. The key is <data>/trueseal.key,
owner-only; it is created, like serve --trueseal does on its first
start, when there is none. With --trueseal-key FILE it is that file,
created if missing: on a bus, the one file every broker with --trueseal
is given (serve --trueseal-key FILE; docs/trueseal.md#on-a-bus).`,
		exit:    "0  printed\n1  the key file could not be read or created (other users can read it, not a key)\n2  usage",
		example: "$ busbar trueseal key --data /var/lib/busbar\n$ busbar trueseal key --trueseal-key /etc/busbar/trueseal.key"},

	{path: "completion", args: "SHELL", summary: "print a shell completion script (bash, zsh or fish)",
		text: `Prints a script that completes busbar's commands, subcommands and flags.
Load it from your shell's start-up file.`,
		exit:    "0  printed\n2  an unknown shell",
		example: "$ source <(busbar completion bash)\n$ busbar completion fish > ~/.config/fish/completions/busbar.fish"},
	{path: "version", summary: "print the version (also: busbar --version, busbar -V)",
		text: `Prints the build's semantic version (vMAJOR.MINOR.PATCH; "(devel)"
for a build that did not set one), the commit it was built from, the
protocol versions it speaks (bus frames, sealed blobs, bedrock) and the
Go version and platform that built it, one per line.`,
		exit: "0  printed", example: "$ busbar version"},
	{path: "man", args: "[VERB]", summary: "print a manual page in roff (also: busbar help --man VERB)",
		text: `Prints VERB's manual page, its subcommands included, in roff for man(1),
made from the same text as "busbar help VERB"; without VERB, busbar(1),
the overview. --dir writes every page (busbar.1, busbar-VERB.1) into a
directory instead: release archives carry them in man/man1.`,
		exit:    "0  printed or written\n1  a page could not be written\n2  an unknown verb",
		example: "$ busbar man pub | man -l -\n$ busbar man --dir ~/.local/share/man/man1"},
	{path: "help", args: "[VERB [SUBCOMMAND]]", summary: "show the help of busbar or of a verb",
		text: "Same as busbar VERB --help; busbar help --man VERB prints it as a manual page.", exit: "0  printed\n2  an unknown verb", example: "$ busbar help pub"},
}

// page finds the help page of path.
func page(path string) (helpPage, bool) {
	for _, p := range helpPages {
		if p.path == path {
			return p, true
		}
	}
	return helpPage{}, false
}

// subcommands are the subcommands of path, in help order.
func subcommands(path string) []string {
	var out []string
	for _, p := range helpPages {
		if rest, ok := strings.CutPrefix(p.path, path+" "); ok && !strings.Contains(rest, " ") {
			out = append(out, rest)
		}
	}
	return out
}

// verbNames are the top-level commands, in help order.
func verbNames() []string {
	var out []string
	for _, p := range helpPages {
		if !strings.Contains(p.path, " ") {
			out = append(out, p.path)
		}
	}
	return out
}

// writeOverview is `busbar help`.
func writeOverview(w io.Writer) {
	fmt.Fprint(w, `busbar: a message bus for plugins, services and devices: the broker, the
durable relay and the command line, in one binary.

usage: busbar VERB [arguments] [flags]

verbs:
`)
	for _, name := range verbNames() {
		p, _ := page(name)
		fmt.Fprintf(w, "  %-10s %s\n", name, p.summary)
	}
	fmt.Fprint(w, `
Start a broker with "busbar serve", then in another terminal:
  busbar sub news            busbar pub news hello

"busbar help VERB" or "busbar VERB --help" explains a verb;
"busbar --version" prints the version. Full guide: docs/cli.md.
`)
}

// writeHelp prints the help page of path; fs, when not nil, supplies the
// flags.
func writeHelp(w io.Writer, path string, fs *flag.FlagSet) {
	if path == "" {
		writeOverview(w)
		return
	}
	p, ok := page(path)
	if !ok { // every command has a page (a test checks): never reached
		p = helpPage{path: path}
	}
	subs := subcommands(path)
	usage := "busbar " + path
	if len(subs) > 0 {
		usage += " SUBCOMMAND [arguments]"
	}
	if p.args != "" {
		usage += " " + p.args
	}
	if fs != nil && hasFlags(fs) {
		usage += " [flags]"
	}
	fmt.Fprintf(w, "usage: %s\n\n%s.\n", usage, capitalize(p.summary))
	if p.text != "" {
		fmt.Fprintf(w, "\n%s\n", p.text)
	}
	if len(subs) > 0 {
		fmt.Fprintln(w, "\nSubcommands:")
		for _, s := range subs {
			sp, _ := page(path + " " + s)
			fmt.Fprintf(w, "  %-9s %s\n", s, sp.summary)
		}
		fmt.Fprintf(w, "\n\"busbar %s SUBCOMMAND --help\" explains one.\n", path)
	}
	if fs != nil && hasFlags(fs) {
		fmt.Fprintln(w, "\nFlags:")
		writeFlags(w, fs)
	}
	fmt.Fprintf(w, "\nExit status:\n%s\n", indent(exitOf(path)))
	if p.example != "" {
		fmt.Fprintf(w, "\nExamples:\n%s\n", indent(p.example))
	}
}

// exitOf is the exit statuses of path, or of the nearest parent that says.
func exitOf(path string) string {
	for {
		if p, ok := page(path); ok && p.exit != "" {
			return p.exit
		}
		i := strings.LastIndex(path, " ")
		if i < 0 {
			return exitCommon
		}
		path = path[:i]
	}
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// writeFlags lists fs's flags as the docs write them: --name VALUE.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		left := "--" + f.Name
		if v := valueName(f); v != "" {
			left += " " + v
		}
		_, usage := flag.UnquoteUsage(f)
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" {
			usage += fmt.Sprintf(" (default %s)", d)
		}
		fmt.Fprintf(w, "  %s\n%s\n", left, wrap(usage, "      ", helpWidth))
	})
}

// helpWidth is the column a flag's description is wrapped at.
const helpWidth = 80

// wrap breaks s into lines of at most width columns (a longer word stays
// whole), each starting with prefix.
func wrap(s, prefix string, width int) string {
	var b strings.Builder
	line := prefix
	for _, word := range strings.Fields(s) {
		if line != prefix && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = prefix
		}
		if line != prefix {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

// valueNames name a flag's value by the flag, where its type says too
// little ("string").
var valueNames = map[string]string{
	"data": "DIR", "device": "DIR", "server": "URL[,URL...]", "credentials": "FILE", "name": "NAME",
	"exec": "CMD", "principals": "FILE", "tls-cert": "FILE", "tls-key": "FILE", "unix": "PATH",
	"tcp": "ADDR", "tls": "ADDR", "nats": "URL[,URL...]", "nats-creds": "FILE", "nats-tls-ca": "FILE",
	"nats-tls-cert": "FILE", "nats-tls-key": "FILE", "log-level": "LEVEL", "label": "LABEL",
	"service": "NAME", "version": "VERSION", "target": "TARGET", "medium": "MEDIUM",
	"command": "NAME=DESCRIPTION", "announce": "SERVICE", "app": "NAME", "ca": "FILE",
	"nats-prefix": "PREFIX", "addon-id": "ID", "export-state": "NS[,NS...]", "export-events": "CHANNEL[,CHANNEL...]",
	"config": "FILE", "http": "ADDR", "http-unix": "PATH", "https": "ADDR", "nats-relays": "NAME[,NAME...]", "ws-origin": "ORIGIN[,ORIGIN...]",
	"out": "FILE", "nodes": "NAME[,NAME...]", "node": "NODE[,NODE...]",
	"send": "PATTERN[,...]", "request": "PATTERN[,...]", "publish": "PATTERN[,...]", "subscribe": "PATTERN[,...]",
	"handle": "PATTERN[,...]", "tap": "PATTERN[,...]", "state-read": "PATTERN[,...]", "state-write": "PATTERN[,...]",
	"state-admin": "PATTERN[,...]", "nats-bus-key": "FILE", "group": "GROUP", "queue": "QUEUE",
	"moonbridge": "ADDR", "moonbridge-proxy": "NODE", "moonbridge-allow-hosts": "HOST[,HOST...]",
	"trueseal": "ADDR[,ADDR]", "trueseal-key": "FILE", "cosmix-socket": "PATH",
}

func valueName(f *flag.Flag) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	kind, _ := flag.UnquoteUsage(f)
	if strings.Count(f.Usage, "`") >= 2 {
		return kind // the flag names its value itself: `URL` (status --http, beside serve's --http ADDR)
	}
	if v, ok := valueNames[f.Name]; ok {
		return v
	}
	switch kind {
	case "duration":
		return "DURATION"
	case "int", "uint", "int64", "uint64":
		return "N"
	case "float":
		return "X"
	case "":
		return "VALUE"
	default:
		return strings.ToUpper(kind)
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

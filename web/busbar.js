// busbar.js — the busbar browser client: a plain ES module, no build step,
// no dependencies. It speaks the busbar protocol over a WebSocket, one frame
// per binary message (docs/protocol.md#websocket), with the shape of the Go
// client (docs/browser.md):
//
//   import { connect } from "http://127.0.0.1:4224/busbar.js";
//   const bus = await connect("ws://127.0.0.1:4224/bus", { node: "page", principal: "web", secret });
//   const ch = bus.channel("orders.created");
//   await ch.subscribe((m) => console.log(m.text()));
//   const receipt = await ch.send("billing", "order-7");   // { id, result: "ACCEPTED", node }
//   const reply = await bus.channel("invoice.total").request("billing", "order-7");
//   const w = await bus.state("home").watch((e) => console.log(e.k, e.v));

export const PROTOCOL_VERSION = "1";

// Return codes (docs/protocol.md#return-codes).
export const RC = Object.freeze({ SUCCESS: 0, WARNING: 5, ERROR: 10, FAILURE: 20 });

// Receipt results and request error kinds (docs/messaging.md#results).
export const Result = Object.freeze({
  ACCEPTED: "ACCEPTED", NO_SUBSCRIBER: "NO_SUBSCRIBER", NOT_CONNECTED: "NOT_CONNECTED",
  BACKPRESSURED: "BACKPRESSURED", REJECTED: "REJECTED", TIMED_OUT: "TIMED_OUT", FAILED: "FAILED",
  NO_HANDLER: "NO_HANDLER", OVERLOAD: "OVERLOAD", TIMEOUT: "TIMEOUT", DISCONNECT: "DISCONNECT",
  HANDLER_FAILED: "HANDLER_FAILED", AMBIGUOUS: "AMBIGUOUS",
});

// Limits the client checks before sending; the broker's own come in its
// welcome (max_payload), which the client also honours.
export const MAX_CHANNEL_LEN = 128;
export const DEFAULT_TIMEOUT_MS = 30000; // a call's deadline when none is given, as the Go client's
export const HANDSHAKE_TIMEOUT_MS = 10000;
const MAX_TTL_MS = 4294967295;

// BusError is the base of every error this module throws; code names the
// kind, as the Go client's sentinels do.
export class BusError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "BusError";
    this.code = code;
  }
}
// Refused before anything was sent (the Go client's plain errors).
export class BadChannelError extends BusError { constructor(m) { super("BAD_CHANNEL", m); this.name = "BadChannelError"; } }
export class BadAddressError extends BusError { constructor(m) { super("BAD_ADDRESS", m); this.name = "BadAddressError"; } }
export class PayloadTooLargeError extends BusError { constructor(m) { super("PAYLOAD_TOO_LARGE", m); this.name = "PayloadTooLargeError"; } }
export class ClosedError extends BusError { constructor(m) { super("CLOSED", m); this.name = "ClosedError"; } }
// The handshake: bad credentials, another protocol version, refused.
export class AuthError extends BusError { constructor(m) { super("AUTH", m); this.name = "AuthError"; } }
export class IncompatibleError extends BusError { constructor(m) { super("INCOMPATIBLE", m); this.name = "IncompatibleError"; } }
export class RefusedError extends BusError { constructor(m) { super("REFUSED", m); this.name = "RefusedError"; } }
// A request (or publish, subscribe, handle, state call) the broker or a
// handler answered with a failure: kind is one of NO_HANDLER, OVERLOAD,
// TIMEOUT, DISCONNECT, REJECTED, AMBIGUOUS, HANDLER_FAILED.
export class RequestError extends BusError {
  constructor(kind, rc, text) {
    super(kind, `${kind}: ${text}`);
    this.name = "RequestError";
    this.kind = kind;
    this.rc = rc;
    this.text = text;
  }
}
// A state write that lost to a newer one it had not seen, twice.
export class SupersededError extends BusError {
  constructor(winner) {
    super("SUPERSEDED", `superseded by version ${winner.ver} from ${winner.src}`);
    this.name = "SupersededError";
    this.winner = winner;
  }
}

// HandlerError lets a handler choose its return code (10 or more).
export class HandlerError extends Error {
  constructor(rc, text) {
    super(text);
    this.name = "HandlerError";
    this.rc = rc;
  }
}

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: false });

// --- frames (docs/protocol.md#the-text-frame) ---

// encodeFrame returns the text form of headers (an object) and body
// (Uint8Array): "---\n", sorted "key: value\n" lines, "---\n", the body.
export function encodeFrame(headers, body = new Uint8Array(0)) {
  let head = "---\n";
  for (const k of Object.keys(headers).sort()) {
    const v = String(headers[k]);
    if (v.includes("\n")) throw new BusError("MALFORMED", `header ${k} holds a newline`);
    head += `${k}: ${v}\n`;
  }
  head += "---\n";
  const h = enc.encode(head);
  const out = new Uint8Array(h.length + body.length);
  out.set(h, 0);
  out.set(body, h.length);
  return out;
}

// decodeFrame parses one frame into { headers, body }; null when it is
// not a frame.
export function decodeFrame(bytes) {
  const nl = (from) => { const i = bytes.indexOf(10, from); return i < 0 ? bytes.length : i; };
  let end = nl(0);
  if (dec.decode(bytes.subarray(0, end)) !== "---") return null;
  const headers = {};
  let pos = end + 1;
  for (;;) {
    if (pos >= bytes.length) return null;
    end = nl(pos);
    const line = dec.decode(bytes.subarray(pos, end));
    pos = end + 1;
    if (line === "---") break;
    const i = line.indexOf(": ");
    if (i > 0 && !(line.slice(0, i) in headers)) headers[line.slice(0, i)] = line.slice(i + 2);
  }
  return { headers, body: bytes.slice(Math.min(pos, bytes.length)) };
}

function toBytes(payload) {
  if (payload === undefined || payload === null) return new Uint8Array(0);
  if (payload instanceof Uint8Array) return payload.slice();
  if (payload instanceof ArrayBuffer) return new Uint8Array(payload.slice(0));
  if (typeof payload === "string") return enc.encode(payload);
  throw new TypeError("a payload is a string, a Uint8Array or an ArrayBuffer (JSON.stringify an object first)");
}

// --- names (the rules of auth.ValidChannel and wire.ParseTarget) ---

const channelToken = /^[A-Za-z0-9_-]+$/;
function checkChannel(name) {
  if (typeof name !== "string" || name.length === 0 || enc.encode(name).length > MAX_CHANNEL_LEN) {
    throw new BadChannelError(`channel ${JSON.stringify(name)}: 1 to ${MAX_CHANNEL_LEN} bytes`);
  }
  if (!name.split(".").every((t) => channelToken.test(t))) {
    throw new BadChannelError(`channel ${JSON.stringify(name)}: dotted tokens of letters, digits, '_' and '-'`);
  }
  if (name === "bus" || name.startsWith("bus.")) throw new BadChannelError(`channel ${name}: "bus." is reserved`);
}

const label = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;
function checkTarget(target) {
  if (typeof target !== "string" || target === "") throw new BadAddressError("a target is needed (publish reaches every node)");
  if (target.includes("@")) throw new BadAddressError(`target ${target}: cross-mesh addresses are refused`);
  const labels = target.split(".");
  if (labels.length > 4 || !labels.every((l) => label.test(l))) {
    throw new BadAddressError(`target ${JSON.stringify(target)}: labels of lower-case letters, digits and '-'`);
  }
}

function newID() {
  if (globalThis.crypto?.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function ttlOf(deadline) {
  return String(Math.max(1, Math.min(MAX_TTL_MS, Math.ceil(deadline - Date.now()))));
}

function requestError(h) {
  const rc = Number.parseInt(h.rc ?? "20", 10);
  const kind = h.result || Result.HANDLER_FAILED;
  return new RequestError(kind, Number.isNaN(rc) ? RC.FAILURE : rc, h.error ?? "");
}

function isError(h) {
  if (h.rc === undefined) return false;
  const rc = Number(h.rc);
  return !(Number.isInteger(rc) && rc >= 0 && rc < 10);
}

// Message is what a subscriber or handler receives, and what a request
// returns.
export class Message {
  constructor(headers, body) {
    this.headers = headers;
    this.payload = body; // a Uint8Array of the receiver's own
  }
  get id() { return this.headers.id; }
  get from() { return this.headers.from; }
  get to() { return this.headers.to; }
  get channel() { return this.headers.command; }
  get rc() { return this.headers.rc === undefined ? RC.SUCCESS : Number(this.headers.rc); }
  text() { return dec.decode(this.payload); }
  json() { return JSON.parse(this.text()); }
}

// connect opens a WebSocket to url (ws://host:port/bus or wss://…), logs
// in as opts.node with opts.principal and opts.secret, and resolves to a
// Client. It rejects with AuthError, IncompatibleError, RefusedError or a
// BusError DISCONNECT.
export async function connect(url, opts = {}) {
  const c = new Client(opts);
  await c._open(url, opts.handshakeTimeout ?? HANDSHAKE_TIMEOUT_MS);
  return c;
}

// Client is one connection: one node on the bus.
export class Client {
  constructor(opts) {
    this.node = opts.node;
    this._opts = opts;
    this._timeout = opts.timeout ?? DEFAULT_TIMEOUT_MS;
    this._calls = new Map(); // id -> { resolve, reject, timer }
    this._subs = new Map(); // channel -> Set of callbacks
    this._handlers = new Map(); // channel -> handler
    this._watches = new Map(); // namespace -> Set of StateWatch
    this._clocks = new Map(); // namespace -> highest version seen
    this._closed = null; // the error every call fails with once set
    this._onclose = [];
  }

  get welcome() { return this._welcome; }

  // closed resolves with the reason once the connection has ended.
  get closed() { return new Promise((r) => (this._closed ? r(this._closed) : this._onclose.push(r))); }

  _open(url, timeoutMs) {
    return new Promise((resolve, reject) => {
      let ws;
      try {
        ws = new WebSocket(url);
      } catch (e) {
        reject(new BusError(Result.DISCONNECT, `cannot open ${url}: ${e.message}`));
        return;
      }
      ws.binaryType = "arraybuffer";
      this._ws = ws;
      let phase = "info";
      const timer = setTimeout(() => fail(new BusError(Result.TIMEOUT, `no welcome within ${timeoutMs} ms`)), timeoutMs);
      const fail = (err) => {
        clearTimeout(timer);
        phase = "failed";
        try { ws.close(); } catch { /* closing anyway */ }
        reject(err);
      };
      ws.onerror = () => {};
      ws.onclose = (ev) => {
        if (phase !== "up") fail(new BusError(Result.DISCONNECT, `connection closed while logging in (${ev.code} ${ev.reason})`));
        else this._end(new BusError(Result.DISCONNECT, `connection lost (${ev.code} ${ev.reason})`));
      };
      ws.onmessage = (ev) => {
        const f = decodeFrame(new Uint8Array(ev.data));
        if (!f) return fail(new BusError("MALFORMED", "the broker sent something that is not a frame"));
        const h = f.headers;
        if (phase === "up") return this._dispatch(f);
        if (h.command === "bus.error") return fail(new RefusedError(`${h.result}: ${h.error}`));
        if (phase === "info") {
          let info;
          try { info = JSON.parse(dec.decode(f.body)); } catch { info = null; }
          if (h.command !== "bus.info" || !info) return fail(new BusError("MALFORMED", "the broker did not start with bus.info"));
          if (info.protocol !== PROTOCOL_VERSION) {
            // Never hand a secret to a peer that speaks another protocol.
            return fail(new IncompatibleError(`broker speaks ${JSON.stringify(info.protocol)}, this client ${JSON.stringify(PROTOCOL_VERSION)}`));
          }
          const hello = { node: this._opts.node };
          if (this._opts.principal) hello.principal = this._opts.principal;
          if (this._opts.secret) hello.secret = this._opts.secret;
          phase = "welcome";
          this._write({ type: "request", command: "bus.hello", bus: PROTOCOL_VERSION, id: newID() }, enc.encode(JSON.stringify(hello)));
          return;
        }
        if (isError(h)) {
          if (h.result === "AUTH") return fail(new AuthError(h.error));
          if (h.result === "VERSION") return fail(new IncompatibleError(h.error));
          return fail(new RefusedError(`${h.result}: ${h.error}`));
        }
        clearTimeout(timer);
        this._welcome = JSON.parse(dec.decode(f.body));
        this.node = this._welcome.node;
        phase = "up";
        this._lastWrite = Date.now();
        this._lastRead = Date.now();
        const beat = Math.max(50, this._welcome.heartbeat_ms / 4);
        this._beat = setInterval(() => this._heartbeat(), beat);
        resolve();
      };
    });
  }

  // _heartbeat keeps the lease: an empty frame after heartbeat_ms of
  // silence; a broker silent for lease_ms ends the connection.
  _heartbeat() {
    const now = Date.now();
    if (now - this._lastRead > this._welcome.lease_ms) {
      this._end(new BusError(Result.DISCONNECT, `broker silent for ${this._welcome.lease_ms} ms`));
      try { this._ws.close(); } catch { /* ended */ }
      return;
    }
    if (now - this._lastWrite >= this._welcome.heartbeat_ms) this._write({}, undefined);
  }

  _write(headers, body) {
    if (this._closed) throw this._closed;
    this._ws.send(encodeFrame(headers, body));
    this._lastWrite = Date.now();
  }

  _end(err) {
    if (this._closed) return;
    this._closed = err;
    clearInterval(this._beat);
    for (const [, call] of this._calls) {
      clearTimeout(call.timer);
      call.reject(err);
    }
    this._calls.clear();
    for (const set of this._watches.values()) for (const w of set) w._end(err);
    this._watches.clear();
    for (const r of this._onclose) r(err);
  }

  // close ends the connection; every open call fails with ClosedError.
  close() {
    this._end(new ClosedError("client closed"));
    try { this._ws.close(1000); } catch { /* already closed */ }
  }

  // _call sends a message and resolves with its answer's frame; on its
  // deadline it rejects with a BusError TIMEOUT.
  _call(headers, body, timeoutMs) {
    if (this._closed) return Promise.reject(this._closed);
    const id = headers.id ?? newID();
    const deadline = Date.now() + (timeoutMs ?? this._timeout);
    headers = { ...headers, id, ttl: ttlOf(deadline) };
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this._calls.delete(id);
        reject(new BusError(Result.TIMEOUT, `no answer within ${timeoutMs ?? this._timeout} ms`));
      }, deadline - Date.now());
      this._calls.set(id, { resolve, reject, timer });
      try {
        this._write(headers, body);
      } catch (e) {
        clearTimeout(timer);
        this._calls.delete(id);
        reject(e);
      }
    });
  }

  async _control(command, body, extra) {
    const f = await this._call({ type: "request", command, ...extra }, typeof body === "string" ? enc.encode(body) : body);
    if (isError(f.headers)) throw requestError(f.headers);
    return f;
  }

  // _register keeps value in table under channel while the broker is
  // asked to register it (so what arrives at once finds it), and takes it
  // back when the broker refuses.
  async _register(table, channel, value, command, extra) {
    table.set(channel, value);
    try {
      await this._control(command, channel, extra);
    } catch (e) {
      table.delete(channel);
      throw e;
    }
  }

  _dispatch(f) {
    this._lastRead = Date.now();
    const h = f.headers;
    if (Object.keys(h).length === 0) return; // a heartbeat
    switch (h.type) {
      case "response": {
        const call = this._calls.get(h["reply-to"]);
        if (!call) return;
        this._calls.delete(h["reply-to"]);
        clearTimeout(call.timer);
        call.resolve(f);
        return;
      }
      case "event":
      case "stream":
        switch (h.command) {
          case "bus.error":
            if (h.result !== "MALFORMED") this._end(new BusError(Result.DISCONNECT, `broker closed the connection: ${h.result}: ${h.error}`));
            return;
          case "bus.goodbye":
          case "bus.service":
            return;
          case "bus.state.delta":
          case "bus.state.reset":
            return this._stateEvent(h.command, JSON.parse(dec.decode(f.body)));
        }
        return this._deliverEvent(f);
      case "request":
        return this._deliverRequest(f);
    }
  }

  _deliverEvent(f) {
    const h = f.headers;
    const subs = this._subs.get(h.command);
    if (h.type === "event") {
      const result = subs && subs.size ? Result.ACCEPTED : Result.NO_SUBSCRIBER;
      this._tryWrite({ type: "response", command: "bus.receipt", "reply-to": h.id, result });
    }
    if (!subs) return;
    for (const cb of subs) {
      queueMicrotask(() => {
        try { cb(new Message(h, f.body.slice())); } catch (e) { console.error("busbar: subscriber threw", e); }
      });
    }
  }

  async _deliverRequest(f) {
    const h = f.headers;
    const reply = (rc, result, error, body) => {
      const r = { type: "response", command: h.command, id: newID(), "reply-to": h.id, rc: String(rc) };
      if (h.from) r.to = h.from;
      if (result) { r.result = result; r.error = error; }
      this._tryWrite(r, body);
    };
    const handler = this._handlers.get(h.command);
    if (!handler) return reply(RC.FAILURE, Result.NO_HANDLER, `no handler for ${h.command} on ${this.node}`);
    let out;
    try {
      out = toBytes(await handler(new Message(h, f.body)));
    } catch (e) {
      if (e instanceof HandlerError) return reply(Math.max(RC.ERROR, e.rc), Result.HANDLER_FAILED, e.message);
      return reply(RC.ERROR, Result.HANDLER_FAILED, String(e?.message ?? e));
    }
    if (out.length > this._welcome.max_payload) {
      return reply(RC.FAILURE, Result.HANDLER_FAILED, `reply of ${out.length} bytes exceeds the limit of ${this._welcome.max_payload}`);
    }
    reply(RC.SUCCESS, "", "", out);
  }

  // _tryWrite sends what answers the broker; once closed there is nobody
  // to tell.
  _tryWrite(headers, body) {
    try { this._write(headers, body); } catch { /* closed: the asker gets DISCONNECT */ }
  }

  // channel returns a handle on a channel (Go: Scope(...).Channel(name)).
  channel(name) {
    checkChannel(name);
    return new Channel(this, name);
  }

  // state returns a handle on a namespace of replicated state.
  state(ns) {
    return new State(this, ns);
  }

  // announce registers a service this node hosts (Go: Client.Announce):
  // {service, version, schemaVersion, meta, channels, group}. Instances
  // announced with one group share the requests to the bare service name
  // (docs/discovery.md#service-groups). Resolves with the registry's
  // record; it lasts as long as this connection.
  async announce(a) {
    const f = await this._control("bus.announce", JSON.stringify(a));
    return JSON.parse(dec.decode(f.body));
  }

  // withdraw removes this node's announcement of service.
  async withdraw(service) {
    await this._control("bus.withdraw", service);
  }

  _seen(ns, ver) {
    if (ver > (this._clocks.get(ns) ?? 0)) this._clocks.set(ns, ver);
  }

  _stateEvent(command, body) {
    const set = this._watches.get(body.ns);
    if (!set) return;
    for (const w of set) w._event(command, body);
  }
}

// Channel sends on and listens to one channel.
export class Channel {
  constructor(client, name) {
    this.client = client;
    this.name = name;
  }

  _payload(payload) {
    const b = toBytes(payload);
    const max = this.client._welcome.max_payload;
    if (b.length > max) throw new PayloadTooLargeError(`payload of ${b.length} bytes is over the broker's limit of ${max}`);
    return b;
  }

  // send delivers an event to one node and resolves with its receipt
  // { id, result, node }; a deadline that passes gives TIMED_OUT.
  async send(target, payload, { timeout } = {}) {
    checkTarget(target);
    const body = this._payload(payload);
    const id = newID();
    try {
      const f = await this.client._call({ type: "event", command: this.name, to: target, id }, body, timeout);
      return { id, result: f.headers.result, node: f.headers.from ?? target };
    } catch (e) {
      if (e.code === Result.TIMEOUT) return { id, result: Result.TIMED_OUT, node: target };
      if (e.code === Result.DISCONNECT) return { id, result: Result.FAILED, node: target };
      throw e;
    }
  }

  // request asks the channel's handler on target and resolves with the
  // reply, a Message; a failure rejects with a RequestError.
  async request(target, payload, { timeout } = {}) {
    checkTarget(target);
    const body = this._payload(payload);
    let f;
    try {
      f = await this.client._call({ type: "request", command: this.name, to: target }, body, timeout);
    } catch (e) {
      if (e.code === Result.TIMEOUT || e.code === Result.DISCONNECT) throw new RequestError(e.code, RC.FAILURE, e.message);
      throw e;
    }
    if (isError(f.headers)) throw requestError(f.headers);
    return new Message(f.headers, f.body);
  }

  // publish fans an event out to every node permitted to receive the
  // channel and resolves with { id, results: [{ node, result }] }.
  async publish(payload, { timeout } = {}) {
    const body = this._payload(payload);
    const id = newID();
    let f;
    try {
      f = await this.client._call({ type: "event", command: this.name, id }, body, timeout);
    } catch (e) {
      if (e.code === Result.TIMEOUT || e.code === Result.DISCONNECT) throw new RequestError(e.code, RC.FAILURE, e.message);
      throw e;
    }
    if (isError(f.headers)) throw requestError(f.headers);
    return { id, results: JSON.parse(dec.decode(f.body)) };
  }

  // emit sends a stream message: fire and forget.
  emit(payload) {
    this.client._write({ type: "stream", command: this.name, id: newID() }, this._payload(payload));
  }

  // subscribe registers cb for this channel's events; it resolves once the
  // broker took the subscription, with { close() }.
  async subscribe(cb) { return this._subscribe("", cb); }

  // queueSubscribe registers cb for this channel's events as a member of
  // queue (a label): each event or stream message goes to one member of
  // each queue, on one broker or across the brokers of a bus, and to every
  // subscriber outside a queue as before (docs/messaging.md#queue-subscriptions).
  // A page's subscriptions of one channel all belong to one queue, or to
  // none. It resolves with { close() }.
  async queueSubscribe(queue, cb) {
    if (typeof queue !== "string" || !/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(queue)) {
      throw new RequestError(Result.REJECTED, RC.FAILURE, `queue name ${JSON.stringify(queue)} is not a label`);
    }
    return this._subscribe(queue, cb);
  }

  async _subscribe(queue, cb) {
    const c = this.client;
    let set = c._subs.get(this.name);
    if (set && set.queue !== queue) {
      const was = set.queue ? "in queue " + set.queue : "outside any queue";
      throw new RequestError(Result.REJECTED, RC.FAILURE, `${this.name} is subscribed ${was} on this node already; close that subscription first`);
    }
    if (!set) {
      set = new Set();
      set.queue = queue;
      await c._register(c._subs, this.name, set, "bus.sub", queue ? { queue } : undefined);
    }
    set.add(cb);
    return {
      close: async () => {
        set.delete(cb);
        if (set.size === 0 && c._subs.get(this.name) === set) {
          c._subs.delete(this.name);
          await c._control("bus.unsub", this.name);
        }
      },
    };
  }

  // handle registers the channel's one request handler: fn(message)
  // returns (or resolves to) the reply payload, or throws (HandlerError
  // for a code of its choosing). It resolves with { close() }.
  async handle(fn) {
    const c = this.client;
    if (c._handlers.has(this.name)) throw new RequestError(Result.REJECTED, RC.FAILURE, `a handler for ${this.name} is registered already`);
    await c._register(c._handlers, this.name, fn, "bus.handle");
    return {
      close: async () => {
        if (c._handlers.get(this.name) !== fn) return;
        c._handlers.delete(this.name);
        await c._control("bus.unhandle", this.name);
      },
    };
  }
}

// State is one namespace of replicated state (docs/state.md).
export class State {
  constructor(client, ns) {
    this.client = client;
    this.ns = ns;
  }

  async _ask(command, body) {
    const f = await this.client._control(command, JSON.stringify(body));
    return JSON.parse(dec.decode(f.body));
  }

  // get resolves with { entry, found } for key; found is false when the
  // key was never written (a deleted key is found, entry.del true).
  async get(key) {
    const r = await this._ask("bus.state.get", { ns: this.ns, key });
    if (r.found) this.client._seen(this.ns, r.entry.ver);
    return { entry: r.entry, found: r.found };
  }

  // snapshot resolves with the namespace's { ns, owner, seq, entries }.
  async snapshot() {
    const s = await this._ask("bus.state.get", { ns: this.ns });
    for (const e of s.entries ?? []) this.client._seen(this.ns, e.ver);
    return s;
  }

  // set writes value (anything JSON.stringify takes) and resolves with the
  // entry now stored. A write that loses to a version it had not seen is
  // written once more above it; losing again rejects with SupersededError.
  set(key, value) {
    return this._write({ key, value });
  }

  // delete writes a tombstone for key.
  delete(key) {
    return this._write({ key, del: true });
  }

  // open lets every node write key (owner only).
  async open(key) {
    const r = await this._ask("bus.state.open", { ns: this.ns, key });
    return r.entry;
  }

  async _write(d) {
    for (let attempt = 0; ; attempt++) {
      const ver = (this.client._clocks.get(this.ns) ?? 0) + 1;
      const r = await this._ask("bus.state.set", { ns: this.ns, ...d, ver });
      this.client._seen(this.ns, r.entry.ver);
      if (r.applied) return r.entry;
      if (attempt === 1) throw new SupersededError(r.entry);
    }
  }

  // watch resolves with a StateWatch once it holds the namespace's
  // snapshot (w.initial); onChange(entry) then runs for every entry that
  // changes, in order.
  async watch(onChange) {
    const w = new StateWatch(this, onChange);
    await w._start();
    return w;
  }
}

// StateWatch is a replica of one namespace, fed by the broker's deltas.
export class StateWatch {
  constructor(state, onChange) {
    this.state = state;
    this.onChange = onChange;
    this.entries = new Map(); // key -> entry: the replica
    this.err = null;
  }

  async _start() {
    const c = this.state.client;
    let set = c._watches.get(this.state.ns);
    if (!set) c._watches.set(this.state.ns, (set = new Set()));
    set.add(this);
    try {
      this.initial = await this._fetch();
    } catch (e) {
      set.delete(this);
      throw e;
    }
    for (const e of this.initial.entries ?? []) this.entries.set(e.k, e);
  }

  async _fetch() {
    const snap = await this.state._ask("bus.state.watch", { ns: this.state.ns });
    this._seq = snap.seq;
    for (const e of snap.entries ?? []) this.state.client._seen(this.state.ns, e.ver);
    return snap;
  }

  _newer(e) {
    const old = this.entries.get(e.k);
    return !old || e.ver > old.ver || (e.ver === old.ver && e.src > old.src);
  }

  _apply(e) {
    if (!this._newer(e)) return;
    this.entries.set(e.k, e);
    try { this.onChange(e); } catch (err) { console.error("busbar: watch callback threw", err); }
  }

  _event(command, body) {
    if (this._seq === undefined || this.err) return; // not started, or ended
    if (command === "bus.state.reset" || body.seq !== this._seq + 1) {
      this._resync();
      return;
    }
    this._seq = body.seq;
    this.state.client._seen(this.state.ns, body.ver);
    const e = { k: body.key, ver: body.ver, src: body.src };
    if (body.value !== undefined) e.v = body.value;
    if (body.del) e.del = true;
    if (body.open) e.open = true;
    this._apply(e);
  }

  // _resync renews the watch after a gap or a reset and delivers the keys
  // that differ from the replica, as the Go client does.
  async _resync() {
    this._seq = undefined;
    try {
      const snap = await this._fetch();
      for (const e of snap.entries ?? []) this._apply(e);
    } catch (e) {
      this._end(e);
    }
  }

  _end(err) {
    if (!this.err) this.err = err;
  }

  // close stops the watch.
  async close() {
    const c = this.state.client;
    this._end(new ClosedError("watch closed"));
    const set = c._watches.get(this.state.ns);
    if (!set) return;
    set.delete(this);
    if (set.size === 0) {
      c._watches.delete(this.state.ns);
      await c._control("bus.state.unwatch", JSON.stringify({ ns: this.state.ns }));
    }
  }
}

// The gomsg device session over WebSocket: one socket at a time, protobuf
// frames (subprotocol gomsg.v1.proto), the token offered as the subprotocol
// "bearer.<token>", ACKs after the application's handler, de-duplication by
// seq, keepalive pings and reconnects that follow the server's close code.

import { create, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import type { Any } from "@bufbuild/protobuf/wkt";
import {
  ClientPayloadSchema,
  type Connected,
  KickoutReason,
  type Message,
  Option,
  type PullResult,
  type RoomAnswer,
  type ServerPayload,
  ServerPayloadSchema,
} from "./gen/msgpb/msg_pb.js";
import { SeqSet } from "./dedup.js";
import { Backoff, type BackoffOptions } from "./backoff.js";

/** The subprotocol of binary protobuf frames. */
export const PROTO_SUBPROTOCOL = "gomsg.v1.proto";
/** The prefix of the subprotocol that carries the token. */
export const BEARER_PREFIX = "bearer.";

/**
 * The ranges of the server's close codes, which alone decide what the client
 * does: 4000–4499 reconnect (after a backoff; at once for ServerDraining),
 * 4500–4999 stop. Within a range, +0–99 is a gRPC status code and +100–199 a
 * KickoutReason. A code this client does not know is placed by its range.
 */
export const CloseRange = {
  ReconnectMin: 4000,
  ReconnectMax: 4499,
  StopMin: 4500,
  StopMax: 4999,
} as const;

/** Close codes of the contract (see CloseRange). */
export const CloseCode = {
  Unauthenticated: 4516,
  InvalidArgument: 4503,
  PermissionDenied: 4507,
  ResourceExhausted: 4008,
  Unavailable: 4014,
  DeadlineExceeded: 4004,
  NewSession: 4600 + KickoutReason.NEW_SESSION,
  ByRequest: 4100 + KickoutReason.BY_REQUEST,
  AckTimeout: 4100 + KickoutReason.ACK_TIMEOUT,
  SlowConsumer: 4100 + KickoutReason.SLOW_CONSUMER,
  ServerDraining: 4100 + KickoutReason.SERVER_DRAINING,
  /** Sent by this client: no Pong in time. */
  ClientPongTimeout: 3000,
  /** Sent by this client: no Connected frame in time. */
  ClientConnectTimeout: 3001,
  /** Sent by this client: a frame it could not decode. */
  ClientBadFrame: 3002,
  /**
   * Sent by this client: onMessage threw (the message was not processed).
   * The client reconnects after its backoff and the server delivers the
   * message again.
   */
  ClientHandlerFailed: 3003,
} as const;

/**
 * A token, or a function that returns one (called before every connect, so
 * it can refresh an expiring token). It must consist of HTTP token
 * characters (JWTs do) to travel as a subprotocol.
 */
export type TokenSource = string | (() => string | Promise<string>);

/** Where the client is. */
export type State =
  /** Opening a socket (fetching the token first). */
  | "connecting"
  /** The server sent Connected; offline messages are being replayed. */
  | "connected"
  /** The offline replay is done; messages are live. */
  | "ready"
  /** Waiting before the next connect. */
  | "backoff"
  /** Stopped for good: close() was called, or the server said not to reconnect. */
  | "closed";

/** A pushed message as the application sees it. */
export interface PushMessage {
  seq: bigint;
  /** Bitmask of Option values. */
  options: number;
  /** True when the server waits for this message's ACK. */
  needAck: boolean;
  body?: Any;
  /** When station accepted the push (Unix milliseconds). */
  timestamp: bigint;
  /** True for messages of the offline replay (before Ready). */
  replay: boolean;
}

/** A broadcast to a room (room "" for a broadcast to everyone); at most once, never ACKed. */
export interface RoomPush {
  room: string;
  msgs: PushMessage[];
}

/** Why a socket ended (or could not be opened) and what the client does next. */
export interface CloseInfo {
  /** The WebSocket close code; 0 when no socket was opened (the token source failed). */
  code: number;
  reason: string;
  /** The reason of the Kickout frame that preceded the close, if any. */
  kickout?: KickoutReason;
  /** What the client does next. */
  action: Action;
  /** The delay before the next connect in ms (action "reconnect"). */
  delayMs?: number;
}

export type Action = "stop" | "reconnect-now" | "backoff";

/** The events a client emits (client.on). */
export interface Events {
  state: (state: State) => void;
  connected: (info: Connected) => void;
  ready: () => void;
  /** Seqs just ACKed to the server. */
  ack: (seqs: bigint[]) => void;
  /** A message seen before (delivery is at least once): not handed to onMessage again. */
  duplicate: (msg: PushMessage) => void;
  /** Emitted when the Kickout frame arrives, ahead of the messages still waiting for onMessage. */
  kickout: (reason: KickoutReason, message: string) => void;
  close: (info: CloseInfo) => void;
  room: (push: RoomPush) => void;
  roomAnswer: (answer: RoomAnswer) => void;
  pong: (id: bigint, rttMs: number) => void;
  error: (err: Error) => void;
}

export interface ClientOptions {
  /**
   * Handles one message. The client calls it for each new message in order,
   * one at a time (across reconnects too), and ACKs the message after it
   * returns (or its promise resolves). If it throws (or its promise
   * rejects), the message was not processed: it is not ACKed and not marked
   * as seen, no later message of that socket reaches onMessage (order
   * holds), the error is reported on the `error` event, and the client
   * closes the socket (code 3003, ClientHandlerFailed) and reconnects after
   * its backoff, so the server delivers the message again (NEED_ACK
   * messages; one without NEED_ACK counts as delivered once sent, and is
   * not sent again). A handler that wants to drop a message it cannot
   * process returns normally.
   */
  onMessage?: (msg: PushMessage) => void | Promise<void>;
  /** The WebSocket constructor (default globalThis.WebSocket). */
  WebSocket?: WebSocketConstructor;
  /** Interval of keepalive pings in ms (default 25000; 0: none). */
  pingIntervalMs?: number;
  /** How long a ping may go unanswered before the socket is closed, in ms (default 10000). */
  pongTimeoutMs?: number;
  /** How long the server has to send Connected after the socket opened, in ms (default 20000). */
  connectTimeoutMs?: number;
  /** Seqs remembered for de-duplication (default 10000). */
  dedupSize?: number;
  backoff?: BackoffOptions;
  /**
   * Pull mode: the server does not replay the messages stored while the
   * device was offline; the application pages through them with pull().
   * Live messages reach onMessage from the start, possibly before older
   * stored ones (order by seq where it matters). The URL gets ?offline=pull.
   */
  pullOffline?: boolean;
}

/** A page of pull(): the oldest stored messages, and whether more are left. */
export interface PullPage {
  msgs: PushMessage[];
  more: boolean;
}

/** gRPC's RESOURCE_EXHAUSTED: a limit refused the request. */
const resourceExhausted = 8;

/** A pull() the server refused: status is the gRPC code, field the request field at fault. */
export class PullError extends Error {
  constructor(readonly status: number, message: string, readonly field?: string) {
    super(`gomsg: pull refused (status ${status}): ${field ? field + ": " : ""}${message}`);
    this.name = "PullError";
  }
}

/** The part of the WebSocket API the client uses (browsers' and Node's). */
export interface WebSocketLike {
  binaryType: string;
  readonly protocol: string;
  readonly readyState: number;
  onopen: ((ev: any) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: any) => void) | null;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
}

export type WebSocketConstructor = new (url: string, protocols: string[]) => WebSocketLike;

const OPEN = 1;
const tokenChars = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * closeCodeOfKickout is the close code of a session kicked out for reason:
 * NEW_SESSION (the user signed in again on this platform) is in the stop
 * range, every other reason in the reconnect range.
 */
export function closeCodeOfKickout(reason: KickoutReason): number {
  return (reason === KickoutReason.NEW_SESSION ? CloseRange.StopMin : CloseRange.ReconnectMin) + 100 + reason;
}

/**
 * decide tells what to do after a socket ended with code (and, if one came
 * first, a Kickout frame with kickout, whose close code counts): stop in the
 * stop range (4500–4999: a refused token or input, NEW_SESSION), reconnect
 * at once when the server drains, back off otherwise (the reconnect range,
 * the WebSocket's own codes, this client's 3000–3999). A refused token
 * (4516) gets one more try with a fresh token first: see Client.
 */
export function decide(code: number, kickout?: KickoutReason): Action {
  if (kickout !== undefined) code = closeCodeOfKickout(kickout);
  if (code >= CloseRange.StopMin && code <= CloseRange.StopMax) return "stop";
  if (code === CloseCode.ServerDraining) return "reconnect-now";
  return "backoff";
}

type Listeners = { [K in keyof Events]: Set<Events[K]> };

/** One socket's state; replaced on every connect. */
interface Conn {
  ws: WebSocketLike;
  ready: boolean;
  kickout?: KickoutReason;
  pingTimer?: ReturnType<typeof setInterval>;
  pongTimer?: ReturnType<typeof setTimeout>;
  connectTimer?: ReturnType<typeof setTimeout>;
  pingSent: Map<bigint, number>;
  nextPing: bigint;
  /** Room requests waiting for their answer, oldest first, by id. */
  roomWaiters: Map<bigint, { resolve: (a: RoomAnswer) => void; reject: (e: Error) => void }>;
  pullWaiters: Map<bigint, { resolve: (r: PullResult) => void; reject: (e: Error) => void }>;
}

/** Client is a device session that reconnects until closed. Make one with connect. */
export class Client {
  private readonly listeners: Listeners = {
    state: new Set(), connected: new Set(), ready: new Set(), ack: new Set(), duplicate: new Set(),
    kickout: new Set(), close: new Set(), room: new Set(), roomAnswer: new Set(), pong: new Set(), error: new Set(),
  };
  private readonly seen: SeqSet;
  private readonly backoff: Backoff;
  private readonly WS: WebSocketConstructor;
  private conn?: Conn;
  /**
   * Frames are handled in order, one at a time (handlers may be async), on
   * one chain for the whole client: a socket that replaced another waits for
   * the old one's handler to return.
   */
  private chain: Promise<void> = Promise.resolve();
  private stopped = false;
  private reconnectTimer?: ReturnType<typeof setTimeout>;
  private currentState: State = "connecting";
  /** Rooms joined with OK; joined again after every reconnect. */
  private readonly rooms = new Set<string>();
  /** Pulls go one at a time (the server refuses a second in flight). */
  private pullChain: Promise<unknown> = Promise.resolve();
  private nextPull = 1n;
  /** Ids of room requests, echoed in their answers. */
  private nextRoomRequest = 1n;
  /** A refused token was tried again with a fresh one: the next refusal stops. */
  private tokenRetried = false;

  constructor(
    private readonly url: string,
    private readonly token: TokenSource,
    private readonly opts: ClientOptions = {},
  ) {
    const WS = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (!WS) throw new Error("gomsg: no WebSocket implementation: pass options.WebSocket");
    this.WS = WS;
    this.seen = new SeqSet(opts.dedupSize ?? 10000);
    this.backoff = new Backoff(opts.backoff);
    // Open on the next tick so that listeners added right after connect() see everything.
    setTimeout(() => void this.open(), 0);
  }

  /** The current state. */
  get state(): State {
    return this.currentState;
  }

  /** Adds a listener; returns a function that removes it. */
  on<K extends keyof Events>(event: K, fn: Events[K]): () => void {
    this.listeners[event].add(fn);
    return () => this.listeners[event].delete(fn);
  }

  /**
   * Joins a room; resolves with the server's answer (status 0 is OK). A room
   * joined with OK is joined again after every reconnect.
   */
  joinRoom(room: string): Promise<RoomAnswer> {
    return this.roomRequest(room, true);
  }

  /** Leaves a room; resolves with the server's answer. */
  leaveRoom(room: string): Promise<RoomAnswer> {
    this.rooms.delete(room);
    return this.roomRequest(room, false);
  }

  /**
   * Pull ACKs ack (seqs of earlier pages the application handled; the
   * server deletes them from the offline store, at most 1000) and resolves
   * with the next page of the messages stored while the device was offline,
   * oldest first: at most limit (0 or more than the server's page size, 100:
   * the page size), and more when messages are left. Page through the
   * backlog until more is false, each pull ACKing the page before; a
   * message not ACKed comes again. Works with or without pullOffline.
   * A pull the boat refuses for the session's request rate (50 a second
   * by default) is sent again after a short, growing wait, so a loop is
   * paced to what the boat allows.
   * Rejects with a PullError the server refused (nothing was ACKed; status
   * 14 UNAVAILABLE: retry), or an Error when not connected or the socket
   * closed before the answer (pull again: an ACK applied twice is harmless).
   * Pulls are sent one at a time.
   */
  pull(limit = 0, ack: bigint[] = []): Promise<PullPage> {
    const run = () => this.pullOnce(limit, ack);
    const p = this.pullChain.then(run, run);
    this.pullChain = p.catch(() => {});
    return p;
  }

  private async pullOnce(limit: number, ack: bigint[]): Promise<PullPage> {
    const c = this.conn;
    if (!c || this.currentState === "connecting" || this.currentState === "backoff" || this.stopped) {
      throw new Error(`gomsg: not connected (state ${this.currentState})`);
    }
    // A pull refused for the session's request rate (a loop draining a
    // large backlog outruns it) did nothing, its ACKs included: it goes
    // again after a short wait, doubled while refused.
    const paced = new Backoff({ initialMs: 50, maxMs: 2000 });
    for (;;) {
      const id = this.nextPull++;
      const r = await new Promise<PullResult>((resolve, reject) => {
        c.pullWaiters.set(id, { resolve, reject });
        const ok = this.send(c, { body: { case: "pull", value: { id, limit: Math.max(0, Math.min(limit, 2 ** 31 - 1)), ack } } });
        if (!ok) {
          c.pullWaiters.delete(id);
          reject(new Error("gomsg: not connected"));
        }
      });
      if (r.status === resourceExhausted && r.error?.field === "--session-request-rate" && this.conn === c) {
        await new Promise((wake) => setTimeout(wake, paced.next()));
        if (this.conn === c && !this.stopped) continue;
      }
      if (r.status !== 0) throw new PullError(r.status, r.message, r.error?.field || undefined);
      return { msgs: r.msgs.map((m) => toPush(m, false)), more: r.more };
    }
  }

  /** Ends the session and stops reconnecting. */
  close(): void {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    const c = this.conn;
    if (c) {
      this.stopTimers(c);
      c.ws.close(1000, "client closed");
      this.failRoomWaiters(c, new Error("gomsg: client closed"));
    }
    this.setState("closed");
  }

  private emit<K extends keyof Events>(event: K, ...args: Parameters<Events[K]>): void {
    for (const fn of this.listeners[event]) {
      try {
        (fn as (...a: Parameters<Events[K]>) => void)(...args);
      } catch (err) {
        if (event !== "error") this.emit("error", asError(err));
      }
    }
  }

  private setState(s: State): void {
    if (this.currentState === s) return;
    this.currentState = s;
    this.emit("state", s);
  }

  private async open(): Promise<void> {
    if (this.stopped) return;
    this.setState("connecting");
    let token: string;
    try {
      token = typeof this.token === "function" ? await this.token() : this.token;
    } catch (err) {
      this.emit("error", new Error(`gomsg: token source failed: ${asError(err).message}`));
      this.scheduleBackoff({ code: 0, reason: "token source failed", action: "backoff" });
      return;
    }
    if (this.stopped) return;
    if (!tokenChars.test(token)) {
      this.emit("error", new Error("gomsg: the token is empty or has characters a subprotocol cannot carry"));
      this.stopped = true;
      this.setState("closed");
      return;
    }
    let ws: WebSocketLike;
    try {
      ws = new this.WS(this.opts.pullOffline ? withPull(this.url) : this.url, [PROTO_SUBPROTOCOL, BEARER_PREFIX + token]);
    } catch (err) {
      // A malformed URL: retrying will not help.
      this.emit("error", asError(err));
      this.stopped = true;
      this.setState("closed");
      return;
    }
    ws.binaryType = "arraybuffer";
    const c: Conn = { ws, ready: false, pingSent: new Map(), nextPing: 1n, roomWaiters: new Map(), pullWaiters: new Map() };
    this.conn = c;
    ws.onopen = () => {
      if (this.conn !== c) return;
      if (ws.protocol !== "" && ws.protocol !== PROTO_SUBPROTOCOL) {
        this.emit("error", new Error(`gomsg: server chose subprotocol ${JSON.stringify(ws.protocol)}`));
      }
      c.connectTimer = setTimeout(() => this.abort(c, CloseCode.ClientConnectTimeout, "no Connected frame in time"),
        this.opts.connectTimeoutMs ?? 20000);
      const every = this.opts.pingIntervalMs ?? 25000;
      if (every > 0) c.pingTimer = setInterval(() => this.ping(c), every);
    };
    ws.onmessage = (ev) => this.onFrame(c, ev.data);
    ws.onerror = () => {
      // A close event follows; it carries what there is to know.
    };
    ws.onclose = (ev) => this.onClose(c, ev.code, ev.reason);
  }

  private onFrame(c: Conn, data: unknown): void {
    if (this.conn !== c) return;
    if (!(data instanceof ArrayBuffer)) {
      this.abort(c, CloseCode.ClientBadFrame, "text frame on gomsg.v1.proto");
      return;
    }
    let p: ServerPayload;
    try {
      p = fromBinary(ServerPayloadSchema, new Uint8Array(data));
    } catch (err) {
      this.abort(c, CloseCode.ClientBadFrame, "frame is not a ServerPayload");
      return;
    }
    if (p.body.case === "pong") {
      // Keepalive answers skip the queue: a slow handler must not look like a dead link.
      const id = p.body.value.id;
      const sent = c.pingSent.get(id);
      c.pingSent.delete(id);
      if (c.pingSent.size === 0) clearTimeout(c.pongTimer);
      this.emit("pong", id, sent === undefined ? 0 : Date.now() - sent);
      return;
    }
    if (p.body.case === "kickout") {
      // So does a kickout: the close that follows it must know the reason
      // even while a handler holds the queue.
      c.kickout = p.body.value.reason;
      this.emit("kickout", p.body.value.reason, p.body.value.message);
      return;
    }
    if (p.body.case === "pullResult") {
      // Answers to pull() skip the queue too: a handler may await a pull.
      const w = c.pullWaiters.get(p.body.value.id);
      c.pullWaiters.delete(p.body.value.id);
      w?.resolve(p.body.value);
      return;
    }
    // The server answered in time, whatever the queue holds.
    if (p.body.case === "connected") clearTimeout(c.connectTimer);
    this.chain = this.chain
      .then(() => (this.current(c) ? this.handle(c, p) : undefined))
      .catch((err) => this.emit("error", asError(err)));
  }

  /** current tells whether c is the live socket; frames of any other are dropped. */
  private current(c: Conn): boolean {
    return this.conn === c && !this.stopped;
  }

  private async handle(c: Conn, p: ServerPayload): Promise<void> {
    switch (p.body.case) {
      case "connected":
        this.tokenRetried = false;
        this.setState("connected");
        this.emit("connected", p.body.value);
        for (const room of this.rooms) {
          this.roomRequest(room, true).catch(() => {});
        }
        return;
      case "messages":
        return this.handleMessages(c, p.body.value.msgs);
      case "ready":
        c.ready = true;
        this.backoff.reset();
        this.setState("ready");
        this.emit("ready");
        return;
      case "roomMessages":
        this.emit("room", { room: p.body.value.room, msgs: p.body.value.msgs.map((m) => toPush(m, false)) });
        return;
      case "roomAnswer": {
        const a = p.body.value;
        if (a.join && a.status === 0) this.rooms.add(a.room);
        // By id; a boat that echoes none answers in order.
        const id = a.id !== 0n && c.roomWaiters.has(a.id) ? a.id : c.roomWaiters.keys().next().value;
        if (id !== undefined) {
          c.roomWaiters.get(id)?.resolve(a);
          c.roomWaiters.delete(id);
        }
        this.emit("roomAnswer", a);
        return;
      }
      default:
        return;
    }
  }

  /**
   * handleMessages hands the new messages of one frame to onMessage and ACKs
   * the processed ones. It stops at the first message whose handler threw
   * (the socket is closed then, so the server delivers it again) and when
   * c is no longer the live socket.
   */
  private async handleMessages(c: Conn, msgs: Message[]): Promise<void> {
    const acks: bigint[] = [];
    let failed: { seq: bigint; err: Error } | undefined;
    for (const m of msgs) {
      if (!this.current(c)) break;
      const msg = toPush(m, !c.ready);
      if (this.seen.has(msg.seq)) {
        // Seen before: the handler ran; ACK again, the server may be waiting.
        this.emit("duplicate", msg);
      } else {
        try {
          if (this.opts.onMessage) await this.opts.onMessage(msg);
        } catch (err) {
          failed = { seq: msg.seq, err: asError(err) };
          break;
        }
        this.seen.add(msg.seq);
      }
      if (msg.needAck) acks.push(msg.seq);
    }
    if (acks.length > 0 && this.send(c, { body: { case: "ack", value: { seqs: acks } } })) this.emit("ack", acks);
    if (failed) {
      const err = new Error(`gomsg: message handler failed (seq ${failed.seq}): ${failed.err.message}`, { cause: failed.err });
      if (this.current(c)) this.abort(c, CloseCode.ClientHandlerFailed, "message handler failed", err);
      else this.emit("error", err); // the socket is gone already (or close() was called)
    }
  }

  private send(c: Conn, payload: MessageInitShape<typeof ClientPayloadSchema>): boolean {
    if (this.conn !== c || c.ws.readyState !== OPEN) return false;
    c.ws.send(toBinary(ClientPayloadSchema, create(ClientPayloadSchema, payload)));
    return true;
  }

  private ping(c: Conn): void {
    const id = c.nextPing++;
    if (!this.send(c, { body: { case: "ping", value: { id } } })) return;
    c.pingSent.set(id, Date.now());
    if (c.pingSent.size === 1) {
      c.pongTimer = setTimeout(() => this.abort(c, CloseCode.ClientPongTimeout, "no pong in time"),
        this.opts.pongTimeoutMs ?? 10000);
    }
  }

  private roomRequest(room: string, join: boolean): Promise<RoomAnswer> {
    const c = this.conn;
    if (!c || this.currentState === "connecting" || this.currentState === "backoff" || this.stopped) {
      return Promise.reject(new Error(`gomsg: not connected (state ${this.currentState})`));
    }
    return new Promise((resolve, reject) => {
      const id = this.nextRoomRequest++;
      const ok = this.send(c, {
        body: join ? { case: "joinRoom", value: { room, id } } : { case: "leaveRoom", value: { room, id } },
      });
      if (!ok) {
        reject(new Error("gomsg: not connected"));
        return;
      }
      c.roomWaiters.set(id, { resolve, reject });
    });
  }

  /** abort closes the socket from this side; the close event decides what follows. */
  private abort(c: Conn, code: number, reason: string, err = new Error(`gomsg: ${reason}`)): void {
    if (this.conn !== c) return;
    this.emit("error", err);
    this.stopTimers(c);
    c.ws.close(code, reason);
    // Browsers report a locally closed socket's close event later; act now.
    this.onClose(c, code, reason);
  }

  private onClose(c: Conn, code: number, reason: string): void {
    if (this.conn !== c) return;
    this.conn = undefined;
    this.stopTimers(c);
    this.failRoomWaiters(c, new Error(`gomsg: socket closed (${code})`));
    if (this.stopped) {
      this.emit("close", { code, reason, kickout: c.kickout, action: "stop" });
      this.setState("closed");
      return;
    }
    let action = decide(code, c.kickout);
    if (action === "stop" && code === CloseCode.Unauthenticated && !this.tokenRetried && typeof this.token === "function") {
      // A refused token: one more try at once, with a fresh one.
      this.tokenRetried = true;
      action = "reconnect-now";
    }
    const info: CloseInfo = { code, reason, kickout: c.kickout, action };
    if (action === "stop") {
      this.stopped = true;
      this.emit("close", info);
      this.setState("closed");
      return;
    }
    if (action === "reconnect-now") {
      info.delayMs = 0;
      this.emit("close", info);
      this.setState("backoff");
      this.reconnectTimer = setTimeout(() => void this.open(), 0);
      return;
    }
    this.scheduleBackoff(info);
  }

  private scheduleBackoff(info: CloseInfo): void {
    const delay = this.backoff.next();
    info.delayMs = delay;
    this.emit("close", info);
    this.setState("backoff");
    this.reconnectTimer = setTimeout(() => void this.open(), delay);
  }

  private stopTimers(c: Conn): void {
    clearTimeout(c.connectTimer);
    clearInterval(c.pingTimer);
    clearTimeout(c.pongTimer);
  }

  private failRoomWaiters(c: Conn, err: Error): void {
    for (const w of c.roomWaiters.values()) w.reject(err);
    c.roomWaiters.clear();
    for (const w of c.pullWaiters.values()) w.reject(err);
    c.pullWaiters.clear();
  }
}

/**
 * connect starts a device session at url (ws://host:port/v1/connect) and
 * keeps it up until close() or until the server says not to reconnect.
 */
export function connect(url: string, token: TokenSource, opts: ClientOptions = {}): Client {
  return new Client(url, token, opts);
}

function toPush(m: Message, replay: boolean): PushMessage {
  return {
    seq: m.seq,
    options: m.options,
    needAck: (m.options & Option.NEED_ACK) !== 0,
    body: m.body,
    timestamp: m.timestamp,
    replay,
  };
}

/** withPull adds ?offline=pull (pull mode) to a session URL. */
function withPull(url: string): string {
  const u = new URL(url);
  u.searchParams.set("offline", "pull");
  return u.toString();
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

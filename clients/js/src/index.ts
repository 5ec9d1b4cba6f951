export {
  type Action,
  BEARER_PREFIX,
  Client,
  type ClientOptions,
  CloseCode,
  closeCodeOfKickout,
  type CloseInfo,
  CloseRange,
  connect,
  decide,
  type Events,
  PROTO_SUBPROTOCOL,
  PullError,
  type PullPage,
  type PushMessage,
  type RoomPush,
  type State,
  type TokenSource,
  type WebSocketConstructor,
  type WebSocketLike,
} from "./client.js";
export { Backoff, type BackoffOptions } from "./backoff.js";
export { SeqSet } from "./dedup.js";
export { bodyText, decodeBody, describeBody } from "./body.js";
export { KickoutReason, Option, type RoomAnswer, type Connected, type PullResult } from "./gen/msgpb/msg_pb.js";
export * as msgpb from "./gen/msgpb/msg_pb.js";
export * as errorpb from "./gen/errorpb/error_pb.js";

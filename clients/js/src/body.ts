import { type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { type Any, anyIs, anyUnpack, StringValueSchema } from "@bufbuild/protobuf/wkt";

/**
 * decodeBody unpacks a message body of the given type, or returns undefined
 * when the body is absent or of another type. Example:
 * `decodeBody(msg.body, ChatSchema)` with ChatSchema generated from your own
 * .proto by protoc-gen-es.
 */
export function decodeBody<Desc extends DescMessage>(body: Any | undefined, schema: Desc): MessageShape<Desc> | undefined {
  if (!body || !anyIs(body, schema)) return undefined;
  return anyUnpack(body, schema);
}

/** bodyText returns the text of a google.protobuf.StringValue body (what gomsgctl push sends), else undefined. */
export function bodyText(body: Any | undefined): string | undefined {
  return decodeBody(body, StringValueSchema)?.value;
}

/** describeBody renders any body for display: the text of a StringValue, else the type URL and the bytes in base64. */
export function describeBody(body: Any | undefined): string {
  if (!body) return "(no body)";
  const text = bodyText(body);
  if (text !== undefined) return text;
  return `${body.typeUrl} ${base64(body.value)}`;
}

function base64(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s);
}

// A fake AWS Bedrock runtime: checks every request's SigV4 signature the way AWS does (its own
// canonical request and signing-key code over node:crypto, independent of the signer the
// gateway uses), validates Converse bodies the way Bedrock does, and answers in Bedrock's exact
// wire format: JSON for /converse, /count-tokens and /invoke, and the AWS binary event stream
// (encoded here by hand: prelude, typed headers, payload, CRC32s) for /converse-stream.
// fake-bedrock.test.ts runs it against @aws-sdk/client-bedrock-runtime, so it cannot drift.
import { createHash, createHmac, randomUUID, timingSafeEqual } from "node:crypto"
import { crc32 } from "node:zlib"
import {
  countWords,
  isNumber,
  isRecord,
  longText,
  randomId,
  splitFragments,
  splitWords,
  startFake,
  takeWords,
  writeFrames
} from "./fake-common.ts"
import type { FakeUpstream, JsonBody, RecordedRequest, Refusal, ResponseContext, Scenario, TextScenario, ToolCallsScenario } from "./fake-common.ts"

export type * from "./fake-common.ts"

export interface FakeBedrockOptions {
  readonly region: string
  readonly accessKeyId: string
  readonly secretAccessKey: string
  /** When set, requests must carry (and sign) it as `x-amz-security-token`. */
  readonly sessionToken?: string
  /** When given, any other model id is refused as Bedrock refuses an unknown one. */
  readonly models?: ReadonlyArray<string>
  /** Model ids whose CountTokens is not offered. */
  readonly noCountTokens?: ReadonlyArray<string>
  readonly recordRequests?: boolean
}

/** A text answer that thinks first (Claude's extended thinking as Converse carries it). */
export type BedrockTextScenario = TextScenario & { readonly reasoning?: { readonly text: string; readonly signature: string } }

// ---------------------------------------------------------------------------------------------
// The binary event stream

const STRING_HEADER = 7

/** One event stream message: headers (all strings here), payload, and both CRC32s. */
export const encodeEventMessage = (headers: Readonly<Record<string, string>>, payload: Uint8Array): Buffer => {
  const headerParts = Object.entries(headers).map(([name, value]) => {
    const nameBytes = Buffer.from(name, "utf8")
    const valueBytes = Buffer.from(value, "utf8")
    const part = Buffer.alloc(1 + nameBytes.length + 1 + 2 + valueBytes.length)
    part.writeUInt8(nameBytes.length, 0)
    nameBytes.copy(part, 1)
    part.writeUInt8(STRING_HEADER, 1 + nameBytes.length)
    part.writeUInt16BE(valueBytes.length, 2 + nameBytes.length)
    valueBytes.copy(part, 4 + nameBytes.length)
    return part
  })
  const headerBytes = Buffer.concat(headerParts)
  const total = 12 + headerBytes.length + payload.length + 4
  const message = Buffer.alloc(total)
  message.writeUInt32BE(total, 0)
  message.writeUInt32BE(headerBytes.length, 4)
  message.writeUInt32BE(crc32(message.subarray(0, 8)), 8)
  headerBytes.copy(message, 12)
  Buffer.from(payload).copy(message, 12 + headerBytes.length)
  message.writeUInt32BE(crc32(message.subarray(0, total - 4)), total - 4)
  return message
}

/** Bedrock pads each event's JSON with a random `p` so payload sizes do not reveal token lengths. */
const padding = () => "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789".slice(0, 1 + Math.floor(Math.random() * 40))

export const eventMessage = (eventType: string, payload: JsonBody): Buffer =>
  encodeEventMessage(
    { ":event-type": eventType, ":content-type": "application/json", ":message-type": "event" },
    Buffer.from(JSON.stringify({ ...payload, p: padding() }), "utf8")
  )

export const exceptionMessage = (exceptionType: string, message: string): Buffer =>
  encodeEventMessage(
    { ":exception-type": exceptionType, ":content-type": "application/json", ":message-type": "exception" },
    Buffer.from(JSON.stringify({ message }), "utf8")
  )

// ---------------------------------------------------------------------------------------------
// SigV4, verified

const sha256Hex = (data: string | Buffer) => createHash("sha256").update(data).digest("hex")
const hmac = (key: Buffer | string, data: string) => createHmac("sha256", key).update(data).digest()

/** RFC 3986 encoding of every byte but the unreserved ones, as SigV4's canonical request wants. */
const uriEncode = (text: string) => encodeURIComponent(text).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)

const awsError = (status: number, type: string, message: string): Refusal => ({
  status,
  body: { message },
  headers: { "x-amzn-errortype": `${type}:http://internal.amazon.com/coral/com.amazon.coral.service/` }
})

const AUTHORIZATION = /^AWS4-HMAC-SHA256 Credential=([^/,\s]+)\/(\d{8})\/([^/,\s]+)\/([^/,\s]+)\/aws4_request,\s*SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})$/

const amzDateMs = (amzDate: string) =>
  Date.UTC(
    Number(amzDate.slice(0, 4)),
    Number(amzDate.slice(4, 6)) - 1,
    Number(amzDate.slice(6, 8)),
    Number(amzDate.slice(9, 11)),
    Number(amzDate.slice(11, 13)),
    Number(amzDate.slice(13, 15))
  )

const verifySignature = (req: RecordedRequest, options: FakeBedrockOptions): Refusal | undefined => {
  const header = (name: string) => {
    const value = req.headers[name]
    return Array.isArray(value) ? value.join(",") : value
  }
  const authorization = header("authorization")
  if (authorization === undefined) return awsError(403, "MissingAuthenticationTokenException", "Missing Authentication Token")
  const parsed = AUTHORIZATION.exec(authorization)
  if (parsed === null) {
    return awsError(400, "IncompleteSignatureException", `Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters. Authorization=${authorization.split(" ")[0]}`)
  }
  const [, keyId, date, region, service, signedList, signature] = parsed as unknown as [string, string, string, string, string, string, string]
  if (keyId !== options.accessKeyId) return awsError(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
  const amzDate = header("x-amz-date")
  const signed = signedList.split(";")
  if (amzDate === undefined || !/^\d{8}T\d{6}Z$/.test(amzDate) || !signed.includes("x-amz-date") || !signed.includes("host")) {
    return awsError(400, "IncompleteSignatureException", "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header, and host must be signed.")
  }
  const skew = Math.abs(Date.now() - amzDateMs(amzDate))
  if (skew > 5 * 60_000) return awsError(403, "InvalidSignatureException", `Signature expired: ${amzDate} is now earlier than the allowed window of 5 min.`)
  if (date !== amzDate.slice(0, 8)) return awsError(403, "InvalidSignatureException", `Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '${date}' != '${amzDate.slice(0, 8)}'`)
  if (region !== options.region) return awsError(403, "InvalidSignatureException", `Credential should be scoped to a valid region. `)
  if (service !== "bedrock") return awsError(403, "InvalidSignatureException", "Credential should be scoped to correct service: 'bedrock'. ")
  const token = header("x-amz-security-token")
  if (options.sessionToken !== undefined || token !== undefined) {
    if (token !== options.sessionToken || !signed.includes("x-amz-security-token")) {
      return awsError(403, "UnrecognizedClientException", "The security token included in the request is invalid.")
    }
  }
  const payloadHash = sha256Hex(Buffer.from(req.rawBody, "utf8"))
  const declared = header("x-amz-content-sha256")
  if (declared !== undefined && declared !== payloadHash) {
    return awsError(400, "InvalidSignatureException", "The provided 'x-amz-content-sha256' header does not match what was computed.")
  }
  const [rawPath = "/", rawQuery = ""] = req.path.split("?")
  // Every service but S3 encodes the path's segments once more in the canonical request.
  const canonicalUri = rawPath.split("/").map(uriEncode).join("/")
  const canonicalQuery = rawQuery === ""
    ? ""
    : rawQuery.split("&").map((pair) => pair.split("=").map((part) => uriEncode(decodeURIComponent(part))).join("=")).sort().join("&")
  const canonicalHeaders = signed.map((name) => `${name}:${(header(name) ?? "").trim().replace(/\s+/g, " ")}\n`).join("")
  const canonicalRequest = [req.method, canonicalUri, canonicalQuery, canonicalHeaders, signedList, declared ?? payloadHash].join("\n")
  const scope = `${date}/${region}/${service}/aws4_request`
  const stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256Hex(canonicalRequest)].join("\n")
  const key = hmac(hmac(hmac(hmac(`AWS4${options.secretAccessKey}`, date), region), service), "aws4_request")
  const expected = createHmac("sha256", key).update(stringToSign).digest()
  if (!timingSafeEqual(expected, Buffer.from(signature, "hex"))) {
    return awsError(
      403,
      "InvalidSignatureException",
      "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."
    )
  }
  return undefined
}

// ---------------------------------------------------------------------------------------------
// Converse validation

const invalid = (message: string): Refusal => awsError(400, "ValidationException", message)

const constraint = (value: unknown, at: string, rule: string) =>
  invalid(`1 validation error detected: Value '${typeof value === "string" ? value : JSON.stringify(value)}' at '${at}' failed to satisfy constraint: ${rule}`)

const REQUEST_FIELDS = new Set([
  "messages",
  "system",
  "inferenceConfig",
  "toolConfig",
  "guardrailConfig",
  "additionalModelRequestFields",
  "promptVariables",
  "additionalModelResponseFieldPaths",
  "requestMetadata",
  "performanceConfig",
  "serviceTier",
  "outputConfig"
])
const BLOCK_MEMBERS = new Set([
  "text",
  "image",
  "document",
  "video",
  "audio",
  "toolUse",
  "toolResult",
  "guardContent",
  "cachePoint",
  "reasoningContent",
  "citationsContent",
  "searchResult"
])
const NAME = /^[a-zA-Z0-9_-]{1,64}$/
const TOOL_USE_ID = /^[a-zA-Z0-9_.:-]{1,64}$/
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/
const DOCUMENT_NAME = /^(?:[a-zA-Z0-9\-()[\]]| (?! ))+$/
/** Fields of Claude's own body that Converse sets itself and so may not come again in additionalModelRequestFields. */
const CONVERSE_OWNED = new Set(["messages", "system", "max_tokens", "temperature", "top_p", "stop_sequences", "tools", "tool_choice", "anthropic_version"])

/** The one member a tagged union object sets, or a refusal. */
const memberOf = (value: unknown, at: string, allowed: ReadonlySet<string>): string | Refusal => {
  if (!isRecord(value)) return invalid(`The value at ${at} must be an object.`)
  const keys = Object.keys(value)
  if (keys.length !== 1) return invalid(`The value at ${at} must set exactly one member; it sets ${keys.length}.`)
  const key = keys[0]!
  return allowed.has(key) ? key : invalid(`The value at ${at} has an unknown member '${key}'.`)
}

const countCachePoints = (value: unknown): number =>
  Array.isArray(value) ? value.reduce((sum: number, item) => sum + countCachePoints(item), 0) : isRecord(value) ? (("cachePoint" in value ? 1 : 0) + Object.values(value).reduce((sum: number, item) => sum + (isRecord(item) || Array.isArray(item) ? countCachePoints(item) : 0), 0)) : 0

const validateImage = (image: unknown, at: string): Refusal | undefined => {
  if (!isRecord(image) || !["gif", "jpeg", "png", "webp"].includes(String(image.format))) return constraint(isRecord(image) ? image.format : image, `${at}.format`, "Member must satisfy enum value set: [gif, jpeg, png, webp]")
  if (!isRecord(image.source) || typeof image.source.bytes !== "string" || !BASE64.test(image.source.bytes)) return invalid(`The value at ${at}.source is invalid. Provide the image bytes.`)
  return undefined
}

const validateDocument = (document: unknown, at: string): Refusal | undefined => {
  if (!isRecord(document)) return invalid(`The value at ${at} must be an object.`)
  if (typeof document.name !== "string" || !DOCUMENT_NAME.test(document.name)) {
    return invalid(`The document name at ${at}.name can only contain alphanumeric characters, whitespace characters (no more than one in a row), hyphens, parentheses, and square brackets.`)
  }
  const source = memberOf(document.source, `${at}.source`, new Set(["bytes", "text", "content", "s3Location"]))
  if (typeof source !== "string") return source
  if (document.format !== undefined && !["csv", "doc", "docx", "html", "md", "pdf", "txt", "xls", "xlsx"].includes(String(document.format))) {
    return constraint(document.format, `${at}.format`, "Member must satisfy enum value set: [csv, doc, docx, html, md, pdf, txt, xls, xlsx]")
  }
  return undefined
}

const validateBlock = (block: unknown, role: string, at: string): Refusal | undefined => {
  const member = memberOf(block, at, BLOCK_MEMBERS)
  if (typeof member !== "string") return member
  const value = (block as JsonBody)[member]
  switch (member) {
    case "text":
      if (typeof value !== "string") return invalid(`The value at ${at}.text must be a string.`)
      if (value.trim() === "") return invalid(`The text field in the ContentBlock object at ${at} is blank. Add text to the text field, and try again.`)
      return undefined
    case "image":
      return validateImage(value, `${at}.image`)
    case "document":
      return validateDocument(value, `${at}.document`)
    case "toolUse":
      if (role !== "assistant") return invalid(`${at}: toolUse blocks are only allowed in assistant messages.`)
      if (!isRecord(value) || typeof value.toolUseId !== "string" || !TOOL_USE_ID.test(value.toolUseId)) return constraint(isRecord(value) ? value.toolUseId : value, `${at}.toolUse.toolUseId`, "Member must satisfy regular expression pattern: [a-zA-Z0-9_.:-]+")
      if (typeof value.name !== "string" || !NAME.test(value.name)) return constraint(value.name, `${at}.toolUse.name`, "Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+")
      if (!isRecord(value.input)) return invalid(`The format of the value at ${at}.toolUse.input is invalid. Provide a json object for the field and try again.`)
      return undefined
    case "toolResult": {
      if (role !== "user") return invalid(`${at}: toolResult blocks are only allowed in user messages.`)
      if (!isRecord(value) || typeof value.toolUseId !== "string" || !TOOL_USE_ID.test(value.toolUseId)) return constraint(isRecord(value) ? value.toolUseId : value, `${at}.toolResult.toolUseId`, "Member must satisfy regular expression pattern: [a-zA-Z0-9_.:-]+")
      if (!Array.isArray(value.content)) return invalid(`The value at ${at}.toolResult.content must be a list.`)
      if (value.status !== undefined && value.status !== "success" && value.status !== "error") return constraint(value.status, `${at}.toolResult.status`, "Member must satisfy enum value set: [success, error]")
      if (value.status === "error" && value.content.length === 0) return invalid(`The content field at ${at}.toolResult cannot be empty when status value is error.`)
      for (let k = 0; k < value.content.length; k++) {
        const innerAt = `${at}.toolResult.content.${k}`
        const inner = memberOf(value.content[k], innerAt, new Set(["text", "json", "image", "document", "video", "searchResult"]))
        if (typeof inner !== "string") return inner
        const innerValue = (value.content[k] as JsonBody)[inner]
        if (inner === "json" && !isRecord(innerValue)) return invalid(`The format of the value at ${innerAt}.json is invalid. Provide a json object for the field and try again.`)
        if (inner === "image") { const refusal = validateImage(innerValue, `${innerAt}.image`); if (refusal) return refusal }
        if (inner === "document") { const refusal = validateDocument(innerValue, `${innerAt}.document`); if (refusal) return refusal }
      }
      return undefined
    }
    case "reasoningContent": {
      if (role !== "assistant") return invalid(`${at}: reasoningContent blocks are only allowed in assistant messages.`)
      const kind = memberOf(value, `${at}.reasoningContent`, new Set(["reasoningText", "redactedContent"]))
      if (typeof kind !== "string") return kind
      if (kind === "reasoningText" && (!isRecord(value.reasoningText) || typeof value.reasoningText.text !== "string")) return invalid(`The value at ${at}.reasoningContent.reasoningText.text must be a string.`)
      if (kind === "redactedContent" && (typeof value.redactedContent !== "string" || !BASE64.test(value.redactedContent))) return invalid(`The value at ${at}.reasoningContent.redactedContent must be base64 bytes.`)
      return undefined
    }
    case "cachePoint":
      if (!isRecord(value) || value.type !== "default") return constraint(isRecord(value) ? value.type : value, `${at}.cachePoint.type`, "Member must satisfy enum value set: [default]")
      if (value.ttl !== undefined && value.ttl !== "5m" && value.ttl !== "1h") return constraint(value.ttl, `${at}.cachePoint.ttl`, "Member must satisfy enum value set: [5m, 1h]")
      return undefined
    case "searchResult":
      if (!isRecord(value) || typeof value.source !== "string" || typeof value.title !== "string" || !Array.isArray(value.content)) return invalid(`The value at ${at}.searchResult is invalid.`)
      return undefined
    default:
      return undefined
  }
}

/** Each user turn's tool results answer exactly the tool uses of the assistant turn before it. */
const validateToolFlow = (messages: ReadonlyArray<JsonBody>): Refusal | undefined => {
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!
    const content = message.content as Array<JsonBody>
    const results = content.filter((block) => "toolResult" in block).map((block) => block.toolResult.toolUseId as string)
    const previous = i > 0 ? (messages[i - 1]!.content as Array<JsonBody>) : []
    const uses = previous.filter((block) => "toolUse" in block).map((block) => block.toolUse.toolUseId as string)
    if (message.role === "user" && uses.length > 0) {
      if (results.length > uses.length) return invalid(`The number of toolResult blocks at messages.${i}.content exceeds the number of toolUse blocks of previous turn.`)
      const missing = uses.filter((id) => !results.includes(id))
      if (missing.length > 0) return invalid(`Expected toolResult blocks at messages.${i}.content for the following Ids: ${missing.join(", ")}`)
    } else if (results.length > 0) {
      return invalid(`The number of toolResult blocks at messages.${i}.content exceeds the number of toolUse blocks of previous turn.`)
    }
  }
  return undefined
}

const validateInference = (config: unknown): Refusal | undefined => {
  if (config === undefined) return undefined
  if (!isRecord(config)) return invalid("The value at inferenceConfig must be an object.")
  for (const key of Object.keys(config)) {
    if (!["maxTokens", "temperature", "topP", "stopSequences"].includes(key)) return invalid(`The value at inferenceConfig has an unknown member '${key}'.`)
  }
  if (config.maxTokens !== undefined && (!Number.isInteger(config.maxTokens) || (config.maxTokens as number) < 1)) return constraint(config.maxTokens, "inferenceConfig.maxTokens", "Member must have value greater than or equal to 1")
  for (const [key, at] of [["temperature", "inferenceConfig.temperature"], ["topP", "inferenceConfig.topP"]] as const) {
    const value = config[key]
    if (value === undefined) continue
    if (!isNumber(value) || value < 0) return constraint(value, at, "Member must have value greater than or equal to 0")
    if (value > 1) return constraint(value, at, "Member must have value less than or equal to 1")
  }
  const stops = config.stopSequences
  if (stops !== undefined) {
    if (!Array.isArray(stops) || stops.length > 2500) return constraint(stops, "inferenceConfig.stopSequences", "Member must have length less than or equal to 2500")
    if (stops.some((stop) => typeof stop !== "string" || stop.length === 0)) return constraint(stops, "inferenceConfig.stopSequences", "Member must satisfy constraint: [Member must have length greater than or equal to 1]")
  }
  return undefined
}

const validateTools = (toolConfig: unknown, messages: ReadonlyArray<JsonBody>): Refusal | undefined => {
  const usesTools = messages.some((message) => (message.content as Array<JsonBody>).some((block) => "toolUse" in block || "toolResult" in block))
  if (toolConfig === undefined) return usesTools ? invalid("The toolConfig field must be defined when using toolUse and toolResult content blocks.") : undefined
  if (!isRecord(toolConfig) || !Array.isArray(toolConfig.tools) || toolConfig.tools.length === 0) return constraint(isRecord(toolConfig) ? toolConfig.tools : toolConfig, "toolConfig.tools", "Member must have length greater than or equal to 1")
  const names = new Set<string>()
  for (let i = 0; i < toolConfig.tools.length; i++) {
    const at = `toolConfig.tools.${i}`
    const member = memberOf(toolConfig.tools[i], at, new Set(["toolSpec", "cachePoint", "systemTool"]))
    if (typeof member !== "string") return member
    if (member !== "toolSpec") continue
    const spec = (toolConfig.tools[i] as JsonBody).toolSpec
    if (!isRecord(spec) || typeof spec.name !== "string" || !NAME.test(spec.name)) return constraint(isRecord(spec) ? spec.name : spec, `${at}.toolSpec.name`, "Member must satisfy regular expression pattern: [a-zA-Z0-9_-]+")
    if (spec.description !== undefined && (typeof spec.description !== "string" || spec.description === "")) return constraint(spec.description, `${at}.toolSpec.description`, "Member must have length greater than or equal to 1")
    if (!isRecord(spec.inputSchema) || !isRecord(spec.inputSchema.json)) return invalid(`The format of the value at ${at}.toolSpec.inputSchema.json is invalid. Provide a json object for the field and try again.`)
    if (names.has(spec.name)) return invalid(`The tool name ${spec.name} is duplicated. Provide unique tool names and try again.`)
    names.add(spec.name)
  }
  if (toolConfig.toolChoice !== undefined) {
    const choice = memberOf(toolConfig.toolChoice, "toolConfig.toolChoice", new Set(["auto", "any", "tool"]))
    if (typeof choice !== "string") return choice
    const name = (toolConfig.toolChoice as JsonBody).tool?.name
    if (choice === "tool" && !names.has(name)) return invalid(`The tool ${String(name)} in toolConfig.toolChoice is not in toolConfig.tools.`)
  }
  return undefined
}

const validateConverse = (body: JsonBody, modelId: string): Refusal | undefined => {
  for (const key of Object.keys(body)) {
    // Bedrock models its members; the fake refuses any other, so the gateway never relies on one being ignored.
    if (!REQUEST_FIELDS.has(key)) return invalid(`Unexpected field '${key}' in the request body.`)
  }
  const messages = body.messages
  if (!Array.isArray(messages) || messages.length === 0) return invalid("A conversation must start with a user message. Try again with a conversation that starts with a user message.")
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]
    const at = `messages.${i}`
    if (!isRecord(message)) return invalid(`The value at ${at} must be an object.`)
    for (const key of Object.keys(message)) if (key !== "role" && key !== "content") return invalid(`The value at ${at} has an unknown member '${key}'.`)
    if (message.role !== "user" && message.role !== "assistant") return constraint(message.role, `${at}.role`, "Member must satisfy enum value set: [user, assistant]")
    if (i === 0 && message.role !== "user") return invalid("A conversation must start with a user message. Try again with a conversation that starts with a user message.")
    if (i > 0 && messages[i - 1].role === message.role) {
      return invalid("A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.")
    }
    if (!Array.isArray(message.content) || message.content.length === 0) return invalid(`The content field in the Message object at ${at} is empty. Add a ContentBlock object to the content field and try again.`)
    for (let j = 0; j < message.content.length; j++) {
      const refusal = validateBlock(message.content[j], message.role, `${at}.content.${j}`)
      if (refusal !== undefined) return refusal
    }
  }
  if (body.system !== undefined) {
    if (!Array.isArray(body.system)) return invalid("The value at system must be a list.")
    for (let i = 0; i < body.system.length; i++) {
      const member = memberOf(body.system[i], `system.${i}`, new Set(["text", "cachePoint", "guardContent"]))
      if (typeof member !== "string") return member
      const text = (body.system[i] as JsonBody).text
      if (member === "text" && (typeof text !== "string" || text.trim() === "")) return invalid(`The text field in the SystemContentBlock object at system.${i} is blank. Add text to the text field, and try again.`)
    }
  }
  const others = validateInference(body.inferenceConfig) ?? validateTools(body.toolConfig, messages) ?? validateToolFlow(messages)
  if (others !== undefined) return others
  if (countCachePoints([body.system, body.messages, body.toolConfig]) > 4) {
    return invalid(`A maximum of 4 blocks with cache_control may be provided. Found ${countCachePoints([body.system, body.messages, body.toolConfig])}.`)
  }
  const additional = body.additionalModelRequestFields
  if (additional !== undefined) {
    if (!isRecord(additional)) return invalid("The format of the value at additionalModelRequestFields is invalid. Provide a json object for the field and try again.")
    for (const key of Object.keys(additional)) if (CONVERSE_OWNED.has(key)) return invalid(`The additional field ${key} conflicts with an existing field.`)
    const thinking = additional.thinking
    if (isRecord(thinking) && thinking.type === "enabled") {
      const budget = thinking.budget_tokens
      if (!Number.isInteger(budget) || (budget as number) < 1024) return invalid("The model returned the following errors: thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
      const maxTokens = body.inferenceConfig?.maxTokens
      if (typeof maxTokens === "number" && (budget as number) >= maxTokens) return invalid("The model returned the following errors: `max_tokens` must be greater than `thinking.budget_tokens`.")
    }
    if (additional.anthropic_beta !== undefined && !/anthropic\.claude/.test(modelId)) return invalid("The model returned the following errors: Malformed input request: extraneous key [anthropic_beta] is not permitted")
  }
  const output = body.outputConfig
  if (output !== undefined) {
    if (!isRecord(output)) return invalid("The value at outputConfig must be an object.")
    if (output.effort !== undefined && !["low", "medium", "high", "xhigh", "max"].includes(String(output.effort))) return constraint(output.effort, "outputConfig.effort", "Member must satisfy enum value set: [low, medium, high, xhigh, max]")
    const format = output.textFormat
    if (format !== undefined) {
      if (!isRecord(format) || format.type !== "json_schema" || !isRecord(format.structure) || !isRecord(format.structure.jsonSchema)) return invalid("The value at outputConfig.textFormat is invalid.")
      const schema = format.structure.jsonSchema.schema
      try {
        if (typeof schema !== "string" || !isRecord(JSON.parse(schema))) throw new Error()
      } catch {
        return invalid("The value at outputConfig.textFormat.structure.jsonSchema.schema is not a valid JSON schema.")
      }
    }
  }
  return undefined
}

// ---------------------------------------------------------------------------------------------
// Routing

const OPERATIONS = new Set(["converse", "converse-stream", "count-tokens", "invoke"])

interface Routed {
  readonly modelId: string
  readonly operation: string
}

const route = (req: RecordedRequest): Routed | Refusal => {
  const match = /^\/model\/([^/]+)\/([a-z-]+)$/.exec(req.path.split("?")[0] ?? "")
  if (req.method !== "POST" || match === null || !OPERATIONS.has(match[2]!)) return awsError(404, "UnknownOperationException", "")
  return { modelId: decodeURIComponent(match[1]!), operation: match[2]! }
}

const refuse = (req: RecordedRequest, options: FakeBedrockOptions): Refusal | undefined => {
  const routed = route(req)
  if ("status" in routed) return routed
  const unsigned = verifySignature(req, options)
  if (unsigned !== undefined) return unsigned
  if (options.models !== undefined && !options.models.includes(routed.modelId)) return invalid("The provided model identifier is invalid.")
  const body = req.body
  if (!isRecord(body)) return awsError(400, "SerializationException", "Start of structure or map found where not expected.")
  switch (routed.operation) {
    case "count-tokens": {
      if (options.noCountTokens?.includes(routed.modelId)) return invalid("The provided model doesn't support counting tokens.")
      const converse = isRecord(body.input) ? body.input.converse : undefined
      if (!isRecord(converse)) return invalid("The value at input must set exactly one member: converse or invokeModel.")
      const refusal = validateConverse(converse, routed.modelId)
      if (refusal !== undefined) return refusal
      return { status: 200, body: { inputTokens: Math.max(1, countWords(conversationText(converse))) } }
    }
    case "invoke":
      return embeddingAnswer(body, routed.modelId)
    default:
      return validateConverse(body, routed.modelId)
  }
}

// ---------------------------------------------------------------------------------------------
// Answers

const blockText = (block: JsonBody): string => {
  if (typeof block.text === "string") return block.text
  if (isRecord(block.toolUse)) return JSON.stringify(block.toolUse.input)
  if (isRecord(block.toolResult)) return (block.toolResult.content as Array<JsonBody>).map(blockText).join("\n")
  if (isRecord(block.json)) return JSON.stringify(block.json)
  return ""
}

const conversationText = (body: JsonBody): string =>
  [
    ...((body.system ?? []) as Array<JsonBody>).map(blockText),
    ...(body.messages as Array<JsonBody>).flatMap((message) => (message.content as Array<JsonBody>).map(blockText))
  ].join("\n")

/** What the default echoes: the text of the last user turn, or its tool results when it has no text. */
const lastUserText = (body: JsonBody): string => {
  const last = [...(body.messages as Array<JsonBody>)].reverse().find((message) => message.role === "user")
  const blocks = (last?.content ?? []) as Array<JsonBody>
  const texts = blocks.filter((block) => typeof block.text === "string").map((block) => block.text as string)
  return texts.length > 0 ? texts.join("\n") : blocks.map(blockText).join("\n")
}

const STOP_REASONS: Record<string, string> = { stop: "end_turn", length: "max_tokens", content_filter: "content_filtered", tool_calls: "tool_use" }

interface Answer {
  readonly reasoning: { readonly text: string; readonly signature: string } | undefined
  readonly text: string
  readonly calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly input: Record<string, unknown> }>
  readonly stopReason: string
  readonly usage: JsonBody
}

const answerOf = (body: JsonBody, scenario: BedrockTextScenario | ToolCallsScenario): Answer => {
  const spec = scenario.usage
  const input = spec?.input ?? countWords(conversationText(body))
  const maxTokens = body.inferenceConfig?.maxTokens as number | undefined
  let text = scenario.text ?? ""
  let stopReason = "tool_use"
  let calls: Answer["calls"] = []
  if (scenario.kind === "text") {
    stopReason = STOP_REASONS[scenario.finish ?? "stop"] ?? scenario.finish ?? "end_turn"
    if (scenario.finish === undefined && maxTokens !== undefined && countWords(text) > maxTokens) {
      text = takeWords(text, maxTokens)
      stopReason = "max_tokens"
    }
  } else {
    calls = scenario.calls.map((call) => ({ id: call.id ?? `tooluse_${randomId(22)}`, name: call.name, input: call.arguments }))
  }
  const output = spec?.output ?? Math.max(1, countWords(text) + calls.reduce((sum, call) => sum + countWords(`${call.name} ${JSON.stringify(call.input)}`), 0))
  const cacheRead = spec?.cacheRead ?? 0
  const cacheWrite = spec?.cacheWrite ?? 0
  return {
    reasoning: scenario.kind === "text" ? scenario.reasoning : undefined,
    text,
    calls,
    stopReason,
    usage: {
      inputTokens: input,
      outputTokens: output,
      totalTokens: input + output + cacheRead + cacheWrite,
      ...(cacheRead > 0 || cacheWrite > 0 ? { cacheReadInputTokens: cacheRead, cacheWriteInputTokens: cacheWrite } : {})
    }
  }
}

const converseResponse = (answer: Answer): JsonBody => ({
  output: {
    message: {
      role: "assistant",
      content: [
        ...(answer.reasoning === undefined ? [] : [{ reasoningContent: { reasoningText: answer.reasoning } }]),
        ...(answer.text === "" ? [] : [{ text: answer.text }]),
        ...answer.calls.map((call) => ({ toolUse: { toolUseId: call.id, name: call.name, input: call.input } }))
      ]
    }
  },
  stopReason: answer.stopReason,
  usage: answer.usage,
  metrics: { latencyMs: 42 }
})

/** Every message of a streamed answer, in Bedrock's order; text and reasoning blocks have no start event. */
const streamMessages = (answer: Answer): Array<Buffer> => {
  const messages = [eventMessage("messageStart", { role: "assistant" })]
  let index = 0
  if (answer.reasoning !== undefined) {
    for (const word of splitWords(answer.reasoning.text)) {
      messages.push(eventMessage("contentBlockDelta", { contentBlockIndex: index, delta: { reasoningContent: { text: word } } }))
    }
    messages.push(eventMessage("contentBlockDelta", { contentBlockIndex: index, delta: { reasoningContent: { signature: answer.reasoning.signature } } }))
    messages.push(eventMessage("contentBlockStop", { contentBlockIndex: index }))
    index++
  }
  if (answer.text !== "") {
    for (const word of splitWords(answer.text)) messages.push(eventMessage("contentBlockDelta", { contentBlockIndex: index, delta: { text: word } }))
    messages.push(eventMessage("contentBlockStop", { contentBlockIndex: index }))
    index++
  }
  for (const call of answer.calls) {
    messages.push(eventMessage("contentBlockStart", { contentBlockIndex: index, start: { toolUse: { toolUseId: call.id, name: call.name } } }))
    for (const fragment of splitFragments(JSON.stringify(call.input))) {
      messages.push(eventMessage("contentBlockDelta", { contentBlockIndex: index, delta: { toolUse: { input: fragment } } }))
    }
    messages.push(eventMessage("contentBlockStop", { contentBlockIndex: index }))
    index++
  }
  messages.push(eventMessage("messageStop", { stopReason: answer.stopReason }))
  messages.push(eventMessage("metadata", { usage: answer.usage, metrics: { latencyMs: 42 } }))
  return messages
}

const ERRORS: Record<number, { readonly type: string; readonly message: string }> = {
  400: { type: "ValidationException", message: "Malformed input request, please reformat your input and try again." },
  403: { type: "AccessDeniedException", message: "You don't have access to the model with the specified model ID." },
  404: { type: "ResourceNotFoundException", message: "Could not resolve the foundation model from the provided model identifier." },
  408: { type: "ModelTimeoutException", message: "Model has timed out in processing the request. Try your request again." },
  424: { type: "ModelErrorException", message: "The system encountered an unexpected error during processing. Try your request again." },
  429: { type: "ThrottlingException", message: "Too many requests, please wait before trying again." },
  500: { type: "InternalServerException", message: "The server encountered an error processing your request." },
  503: { type: "ServiceUnavailableException", message: "Bedrock is unable to process your request." }
}

const embeddingAnswer = (body: JsonBody, modelId: string): Refusal => {
  const vector = (text: string, size: number) => {
    const digest = createHash("sha256").update(text).digest()
    return Array.from({ length: size }, (_, i) => Math.round(((digest[i % 32]! / 255) * 2 - 1) * 1e6) / 1e6)
  }
  if (/titan-embed-text/.test(modelId)) {
    if (typeof body.inputText !== "string" || body.inputText === "") return invalid("Malformed input request: #: required key [inputText] not found, please reformat your input and try again.")
    const extra = Object.keys(body).find((key) => !["inputText", "dimensions", "normalize", "embeddingTypes"].includes(key))
    if (extra !== undefined) return invalid(`Malformed input request: #: extraneous key [${extra}] is not permitted, please reformat your input and try again.`)
    const size = body.dimensions ?? 1024
    if (![256, 512, 1024].includes(size)) return invalid("Malformed input request: #/dimensions: " + size + " is not a valid enum value, please reformat your input and try again.")
    return { status: 200, body: { embedding: vector(body.inputText, size), inputTextTokenCount: countWords(body.inputText) } }
  }
  if (/cohere\.embed/.test(modelId)) {
    const texts = body.texts
    if (!Array.isArray(texts) || texts.length === 0 || texts.length > 96) return invalid("Malformed input request: #/texts: expected between 1 and 96 items, please reformat your input and try again.")
    if (!["search_document", "search_query", "classification", "clustering"].includes(String(body.input_type))) return invalid("Malformed input request: #: required key [input_type] not found, please reformat your input and try again.")
    const v4 = /embed-v4/.test(modelId)
    const size = body.output_dimension ?? (v4 ? 1536 : 1024)
    const vectors = texts.map((text: string) => vector(text, size))
    const tokens = texts.reduce((sum: number, text: string) => sum + countWords(text), 0)
    return {
      status: 200,
      body: { id: randomUUID(), texts, response_type: v4 ? "embeddings_by_type" : "embeddings_floats", embeddings: v4 ? { float: vectors } : vectors },
      headers: { "x-amzn-bedrock-input-token-count": String(tokens) }
    }
  }
  return invalid("This model doesn't support the InvokeModel operation for embeddings in this fake.")
}

const EVENT_STREAM = "application/vnd.amazon.eventstream"

const respond = (options: FakeBedrockOptions) => async (ctx: ResponseContext, scenario: Scenario): Promise<void> => {
  const body = ctx.body
  // The operation is in the path; the fake's common server keeps it in ctx only through the body, so it is marked there.
  const streaming = (body as { [STREAMING]?: boolean })[STREAMING] === true
  switch (scenario.kind) {
    case "text":
    case "tool_calls": {
      const answer = answerOf(body, scenario)
      if (!streaming) return ctx.sendJson(200, converseResponse(answer))
      ctx.startStream(EVENT_STREAM)
      await writeFrames(ctx, streamMessages(answer), { ...scenario, keepAlive: false })
      return ctx.end()
    }
    case "error": {
      const known = ERRORS[scenario.status] ?? { type: scenario.status >= 500 ? "InternalServerException" : "ValidationException", message: `Error ${scenario.status}` }
      const headers = { "x-amzn-errortype": `${known.type}:http://internal.amazon.com/coral/com.amazon.bedrock/`, ...scenario.headers }
      if (typeof scenario.body === "string") return ctx.sendText(scenario.status, scenario.body, scenario.headers ?? {})
      return ctx.sendJson(scenario.status, scenario.body ?? { message: scenario.message ?? known.message }, headers)
    }
    case "hang":
      return ctx.untilGone()
    case "delay":
      await ctx.sleep(scenario.ms)
      if (ctx.signal.aborted) return
      return respond(options)(ctx, scenario.then)
    case "stall_after": {
      const answer = answerOf(body, scenario.of ?? { kind: "text", text: longText() })
      if (!streaming) {
        ctx.sendPartialJson(200, converseResponse(answer))
      } else {
        const messages = streamMessages(answer)
        ctx.startStream(EVENT_STREAM)
        await writeFrames(ctx, messages.slice(0, Math.min(scenario.chunks, messages.length - 1)), scenario)
      }
      if (scenario.then === "destroy") return ctx.destroy()
      return ctx.untilGone()
    }
    case "mid_stream_error": {
      const type = scenario.errorType ?? "modelStreamErrorException"
      const message = scenario.message ?? "The model stream errored."
      if (!streaming) return ctx.sendJson(424, { message }, { "x-amzn-errortype": "ModelErrorException:http://internal.amazon.com/coral/com.amazon.bedrock/" })
      const messages = streamMessages(answerOf(body, { kind: "text", text: scenario.text ?? longText() }))
      ctx.startStream(EVENT_STREAM)
      await writeFrames(ctx, [...messages.slice(0, Math.min(scenario.afterChunks ?? 2, messages.length - 2)), exceptionMessage(type, message)], scenario)
      return ctx.end()
    }
  }
}

/** Marks, on the recorded body, that the request came to /converse-stream (the common server passes answers the body only). */
const STREAMING = Symbol("streaming")

export interface FakeBedrock extends FakeUpstream {
  /** Model ids of the Converse calls, in order, as the path named them (decoded). */
  readonly modelIds: () => ReadonlyArray<string>
}

export const startFakeBedrock = async (options: FakeBedrockOptions): Promise<FakeBedrock> => {
  const fake = await startFake(
    { apiKey: "", ...(options.recordRequests === undefined ? {} : { recordRequests: options.recordRequests }) },
    {
      basePath: "",
      commonHeaders: () => ({ "x-amzn-requestid": randomUUID() }),
      refuse: (req) => {
        const refusal = refuse(req, options)
        if (refusal === undefined && req.path.split("?")[0]!.endsWith("/converse-stream") && isRecord(req.body)) {
          Object.defineProperty(req.body, STREAMING, { value: true, enumerable: false })
        }
        return refusal
      },
      defaultScenario: (body) => ({ kind: "text", text: `echo: ${lastUserText(body)}` }),
      respond: respond(options)
    }
  )
  return {
    ...fake,
    get requests() {
      return fake.requests
    },
    get aborted() {
      return fake.aborted
    },
    modelIds: () => fake.requests.map((request) => decodeURIComponent(/^\/model\/([^/]+)\//.exec(request.path)?.[1] ?? ""))
  }
}

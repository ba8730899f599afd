/**
 * The AWS Bedrock Converse wire format (`POST /model/{modelId}/converse`, `/converse-stream`,
 * `/count-tokens`), as JSON on the wire: the shapes of `@aws-sdk/client-bedrock-runtime`'s
 * `ConverseRequest`, `ConverseResponse` and `ConverseStreamOutput` with blobs as base64 strings
 * (test/wire/bedrock-converse.test.ts checks them against the installed SDK's types, so they
 * cannot drift). Unions are AWS "tagged unions": an object with exactly one member set.
 *
 * The request types are what the gateway writes; the response and stream types are what it
 * reads, and every field of them is read defensively by the translators (an upstream can omit
 * anything its schema marks optional, and often more).
 */
import { createHash } from "node:crypto"

export type ConverseRole = "user" | "assistant"

export type ConverseImageFormat = "gif" | "jpeg" | "png" | "webp"

export type ConverseDocumentFormat = "csv" | "doc" | "docx" | "html" | "md" | "pdf" | "txt" | "xls" | "xlsx"

export interface ConverseCachePoint {
  readonly type: "default"
  readonly ttl?: "5m" | "1h"
}

export interface ConverseImageBlock {
  readonly format: ConverseImageFormat
  /** `bytes`: base64 of the image. */
  readonly source: { readonly bytes: string }
}

export interface ConverseDocumentBlock {
  readonly format?: ConverseDocumentFormat
  /** Bedrock allows letters, digits, single spaces, hyphens, parentheses and square brackets here. */
  readonly name: string
  readonly source: { readonly bytes: string } | { readonly text: string } | { readonly content: ReadonlyArray<{ readonly text: string }> }
  readonly context?: string
  readonly citations?: { readonly enabled: boolean }
}

export interface ConverseToolUseBlock {
  readonly toolUseId: string
  readonly name: string
  readonly input: unknown
}

export type ConverseToolResultContent =
  | { readonly text: string }
  | { readonly json: unknown }
  | { readonly image: ConverseImageBlock }
  | { readonly document: ConverseDocumentBlock }

export interface ConverseToolResultBlock {
  readonly toolUseId: string
  readonly content: ReadonlyArray<ConverseToolResultContent>
  readonly status?: "success" | "error"
}

/** Claude's thinking as Converse carries it: signed text, or the redacted bytes (base64). */
export type ConverseReasoningContent =
  | { readonly reasoningText: { readonly text: string; readonly signature?: string } }
  | { readonly redactedContent: string }

export interface ConverseSearchResultBlock {
  readonly source: string
  readonly title: string
  readonly content: ReadonlyArray<{ readonly text: string }>
  readonly citations?: { readonly enabled: boolean }
}

export type ConverseContentBlock =
  | { readonly text: string }
  | { readonly image: ConverseImageBlock }
  | { readonly document: ConverseDocumentBlock }
  | { readonly toolUse: ConverseToolUseBlock }
  | { readonly toolResult: ConverseToolResultBlock }
  | { readonly reasoningContent: ConverseReasoningContent }
  | { readonly searchResult: ConverseSearchResultBlock }
  | { readonly cachePoint: ConverseCachePoint }

export interface ConverseMessage {
  readonly role: ConverseRole
  readonly content: ReadonlyArray<ConverseContentBlock>
}

export type ConverseSystemBlock = { readonly text: string } | { readonly cachePoint: ConverseCachePoint }

export interface ConverseToolSpec {
  readonly name: string
  readonly description?: string
  readonly inputSchema: { readonly json: unknown }
  readonly strict?: boolean
}

export type ConverseTool = { readonly toolSpec: ConverseToolSpec } | { readonly cachePoint: ConverseCachePoint }

export type ConverseToolChoice =
  | { readonly auto: Record<string, never> }
  | { readonly any: Record<string, never> }
  | { readonly tool: { readonly name: string } }

export interface ConverseInferenceConfig {
  readonly maxTokens?: number
  readonly temperature?: number
  readonly topP?: number
  readonly stopSequences?: ReadonlyArray<string>
}

export interface ConverseOutputConfig {
  readonly textFormat?: {
    readonly type: "json_schema"
    /** `schema` is the JSON Schema as a JSON string. */
    readonly structure: { readonly jsonSchema: { readonly schema: string; readonly name?: string; readonly description?: string } }
  }
  readonly effort?: string
}

/** The body of `/converse` and `/converse-stream` (the model id travels in the path). */
export interface ConverseRequest {
  readonly messages: ReadonlyArray<ConverseMessage>
  readonly system?: ReadonlyArray<ConverseSystemBlock>
  readonly inferenceConfig?: ConverseInferenceConfig
  readonly toolConfig?: { readonly tools: ReadonlyArray<ConverseTool>; readonly toolChoice?: ConverseToolChoice }
  /** Model-specific parameters Converse does not model (Claude's `thinking`, `top_k`). */
  readonly additionalModelRequestFields?: Readonly<Record<string, unknown>>
  readonly outputConfig?: ConverseOutputConfig
  readonly requestMetadata?: Readonly<Record<string, string>>
}

export type ConverseStopReason =
  | "end_turn"
  | "tool_use"
  | "max_tokens"
  | "stop_sequence"
  | "guardrail_intervened"
  | "content_filtered"
  | "malformed_model_output"
  | "malformed_tool_use"
  | "model_context_window_exceeded"

/**
 * Token counts. For Claude `inputTokens` is the uncached part of the prompt, with cache reads
 * and writes counted apart (as Anthropic's own usage does); `totalTokens` adds them all.
 */
export interface ConverseUsage {
  readonly inputTokens?: number
  readonly outputTokens?: number
  readonly totalTokens?: number
  readonly cacheReadInputTokens?: number
  readonly cacheWriteInputTokens?: number
}

/** A content block of an answer: what the request side has, read defensively (fields may be missing). */
export interface ConverseOutputBlock {
  readonly text?: string
  readonly toolUse?: { readonly toolUseId?: string; readonly name?: string; readonly input?: unknown }
  readonly reasoningContent?: {
    readonly reasoningText?: { readonly text?: string; readonly signature?: string }
    readonly redactedContent?: string
  }
  readonly citationsContent?: { readonly content?: ReadonlyArray<{ readonly text?: string }> }
}

export interface ConverseResponse {
  readonly output?: { readonly message?: { readonly role?: string; readonly content?: ReadonlyArray<ConverseOutputBlock> } }
  readonly stopReason?: ConverseStopReason | (string & {})
  readonly usage?: ConverseUsage
  readonly metrics?: { readonly latencyMs?: number }
  readonly additionalModelResponseFields?: unknown
}

// --- the stream ------------------------------------------------------------------------------

/**
 * The events of `/converse-stream`, by their `:event-type` header; each payload is the event's
 * JSON (Bedrock pads every payload with a random `p` field, which carries nothing). Text and
 * reasoning blocks start with their first delta; only tool use blocks have a start event.
 */
export type ConverseStreamEvent =
  | { readonly type: "messageStart"; readonly payload: { readonly role?: string } }
  | {
    readonly type: "contentBlockStart"
    readonly payload: {
      readonly contentBlockIndex?: number
      readonly start?: { readonly toolUse?: { readonly toolUseId?: string; readonly name?: string } }
    }
  }
  | {
    readonly type: "contentBlockDelta"
    readonly payload: {
      readonly contentBlockIndex?: number
      readonly delta?: {
        readonly text?: string
        /** Tool input arrives as fragments of its JSON text. */
        readonly toolUse?: { readonly input?: string }
        readonly reasoningContent?: { readonly text?: string; readonly signature?: string; readonly redactedContent?: string }
        readonly citation?: unknown
      }
    }
  }
  | { readonly type: "contentBlockStop"; readonly payload: { readonly contentBlockIndex?: number } }
  | { readonly type: "messageStop"; readonly payload: { readonly stopReason?: string; readonly additionalModelResponseFields?: unknown } }
  /** The last event: the only one with the token counts, input included. */
  | { readonly type: "metadata"; readonly payload: { readonly usage?: ConverseUsage; readonly metrics?: { readonly latencyMs?: number } } }

export const CONVERSE_EVENT_TYPES: ReadonlySet<string> = new Set([
  "messageStart",
  "contentBlockStart",
  "contentBlockDelta",
  "contentBlockStop",
  "messageStop",
  "metadata"
])

/**
 * Exceptions that arrive inside the stream (`:message-type: exception`, named by
 * `:exception-type`) after the 200, each with a `{message}` payload.
 */
export const CONVERSE_STREAM_EXCEPTIONS: ReadonlySet<string> = new Set([
  "internalServerException",
  "modelStreamErrorException",
  "validationException",
  "throttlingException",
  "serviceUnavailableException"
])

/** `POST /model/{modelId}/count-tokens` with a Converse input. */
export interface CountTokensRequest {
  readonly input: {
    readonly converse: Pick<ConverseRequest, "messages" | "system" | "toolConfig" | "additionalModelRequestFields">
  }
}

export interface CountTokensResponse {
  readonly inputTokens?: number
}

// --- ids ---------------------------------------------------------------------------------------

const TOOL_USE_ID = /^[a-zA-Z0-9_-]{1,64}$/

/**
 * A tool call id Bedrock accepts (`[a-zA-Z0-9_-]`, 1 to 64 characters). Valid ids are kept;
 * others (dotted, too long, empty) become their readable part plus a hash of the original, so
 * two ids stay distinct and the same id always maps the same way: applied to a toolUse and to
 * the toolResult that answers it, the pair still matches.
 */
export const bedrockToolUseId = (id: string): string => {
  if (TOOL_USE_ID.test(id)) return id
  const readable = id.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 40)
  return `${readable}_${createHash("sha256").update(id).digest("hex").slice(0, 16)}`
}

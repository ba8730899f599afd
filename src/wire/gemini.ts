/**
 * Google's Gemini `generateContent` wire format (the Gemini API's `v1beta` and Vertex AI's
 * `publishers/google` models speak the same JSON), from `@google/genai`'s type definitions:
 * what the gateway sends and reads, field names as on the wire (test/wire/gemini.test.ts holds
 * them against the SDK's types). Also the two Gemini rules every translator needs: the JSON
 * Schema subset Gemini accepts in a function's `parameters`, and the tool call ids Gemini does
 * not give (with the `thoughtSignature` a call must carry back).
 */
import { randomBytes } from "node:crypto"
import { ExpansionBudget, refuse } from "./translate/untranslatable.ts"

export interface GeminiBlob {
  readonly mimeType: string
  /** Base64. */
  readonly data: string
}

export interface GeminiFunctionCall {
  readonly name: string
  readonly args?: Record<string, unknown>
  readonly id?: string
}

export interface GeminiFunctionResponse {
  readonly name: string
  readonly response: Record<string, unknown>
  readonly id?: string
}

export interface GeminiPart {
  readonly text?: string
  /** A summary of the model's thinking (with `includeThoughts`), never an answer. */
  readonly thought?: boolean
  /** Opaque proof of the model's thinking; a function call's must be sent back with it. */
  readonly thoughtSignature?: string
  readonly inlineData?: GeminiBlob
  readonly fileData?: { readonly mimeType?: string; readonly fileUri: string }
  readonly functionCall?: GeminiFunctionCall
  readonly functionResponse?: GeminiFunctionResponse
}

export interface GeminiContent {
  readonly role?: "user" | "model"
  readonly parts: ReadonlyArray<GeminiPart>
}

/** The OpenAPI-style schema subset of `FunctionDeclaration.parameters` and `responseSchema`. */
export interface GeminiSchema {
  readonly type?: "STRING" | "NUMBER" | "INTEGER" | "BOOLEAN" | "ARRAY" | "OBJECT" | "NULL"
  readonly format?: string
  readonly title?: string
  readonly description?: string
  readonly nullable?: boolean
  readonly enum?: ReadonlyArray<string>
  readonly items?: GeminiSchema
  readonly minItems?: string
  readonly maxItems?: string
  readonly properties?: Readonly<Record<string, GeminiSchema>>
  readonly required?: ReadonlyArray<string>
  readonly propertyOrdering?: ReadonlyArray<string>
  readonly anyOf?: ReadonlyArray<GeminiSchema>
  readonly minimum?: number
  readonly maximum?: number
  readonly minLength?: string
  readonly maxLength?: string
  readonly pattern?: string
  readonly default?: unknown
  readonly example?: unknown
}

export interface GeminiFunctionDeclaration {
  readonly name: string
  readonly description?: string
  readonly parameters?: GeminiSchema
}

export interface GeminiTool {
  readonly functionDeclarations: ReadonlyArray<GeminiFunctionDeclaration>
}

export interface GeminiToolConfig {
  readonly functionCallingConfig: {
    readonly mode: "AUTO" | "ANY" | "NONE"
    readonly allowedFunctionNames?: ReadonlyArray<string>
  }
}

export interface GeminiGenerationConfig {
  readonly maxOutputTokens?: number
  readonly temperature?: number
  readonly topP?: number
  readonly topK?: number
  readonly stopSequences?: ReadonlyArray<string>
  readonly seed?: number
  readonly presencePenalty?: number
  readonly frequencyPenalty?: number
  readonly responseMimeType?: string
  readonly responseSchema?: GeminiSchema
  readonly thinkingConfig?: { readonly thinkingBudget?: number; readonly includeThoughts?: boolean }
}

/** The body of `models/{model}:generateContent` and `:streamGenerateContent`. */
export interface GenerateContentRequest {
  readonly contents: ReadonlyArray<GeminiContent>
  readonly systemInstruction?: GeminiContent
  readonly tools?: ReadonlyArray<GeminiTool>
  readonly toolConfig?: GeminiToolConfig
  readonly generationConfig?: GeminiGenerationConfig
}

export type GeminiFinishReason =
  | "FINISH_REASON_UNSPECIFIED"
  | "STOP"
  | "MAX_TOKENS"
  | "SAFETY"
  | "RECITATION"
  | "LANGUAGE"
  | "OTHER"
  | "BLOCKLIST"
  | "PROHIBITED_CONTENT"
  | "SPII"
  | "MALFORMED_FUNCTION_CALL"
  | "IMAGE_SAFETY"
  | "UNEXPECTED_TOOL_CALL"
  | "TOO_MANY_TOOL_CALLS"
  | (string & {})

export interface GeminiCandidate {
  readonly content?: { readonly role?: string; readonly parts?: ReadonlyArray<GeminiPart> }
  readonly finishReason?: GeminiFinishReason
  readonly index?: number
}

export interface GeminiUsage {
  /** The whole prompt, cached tokens included. */
  readonly promptTokenCount?: number
  readonly cachedContentTokenCount?: number
  /** The answer, thinking excluded. */
  readonly candidatesTokenCount?: number
  readonly thoughtsTokenCount?: number
  readonly toolUsePromptTokenCount?: number
  readonly totalTokenCount?: number
}

/** The answer of `:generateContent`, and each event of `:streamGenerateContent?alt=sse`. */
export interface GenerateContentResponse {
  readonly candidates?: ReadonlyArray<GeminiCandidate>
  readonly promptFeedback?: { readonly blockReason?: string; readonly blockReasonMessage?: string }
  readonly usageMetadata?: GeminiUsage
  readonly modelVersion?: string
  readonly responseId?: string
}

/** `:countTokens`: the contents alone, or a whole request (the Gemini API's `generateContentRequest`). */
export interface GeminiCountTokensRequest {
  readonly contents?: ReadonlyArray<GeminiContent>
  readonly generateContentRequest?: GenerateContentRequest & { readonly model: string }
}

export interface GeminiCountTokensResponse {
  readonly totalTokens?: number
  readonly cachedContentTokenCount?: number
}

export interface GeminiEmbedContentRequest {
  readonly model: string
  readonly content: GeminiContent
  readonly taskType?: string
  readonly outputDimensionality?: number
}

/** `:batchEmbedContents` (the Gemini API's; Vertex serves Gemini embeddings through `:predict`). */
export interface GeminiBatchEmbedRequest {
  readonly requests: ReadonlyArray<GeminiEmbedContentRequest>
}

export interface GeminiBatchEmbedResponse {
  readonly embeddings?: ReadonlyArray<{ readonly values?: ReadonlyArray<number> }>
}

// --- schemas ---------------------------------------------------------------------------------

const TYPES: Readonly<Record<string, GeminiSchema["type"]>> = {
  string: "STRING",
  number: "NUMBER",
  integer: "INTEGER",
  boolean: "BOOLEAN",
  array: "ARRAY",
  object: "OBJECT",
  null: "NULL"
}

/** How deep `$ref`s are inlined: recursive schemas are cut there, as an open object. */
const MAX_DEPTH = 24
/**
 * How many schema nodes inlining may produce. The depth bound alone is not enough: a definition
 * that refers to itself twice doubles at every level (2^24 nodes at MAX_DEPTH), which would hold
 * the event loop and the heap for as long as a client's tool schema asks. Real schemas stay far
 * below this; one above it is refused by name.
 */
export const MAX_SCHEMA_NODES = 10_000

type Json = Record<string, unknown>
const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * A JSON Schema as Gemini's schema subset. Gemini refuses any keyword it does not know
 * (`additionalProperties`, `$schema`, `$defs`, `const`, `oneOf`...), so each known keyword is
 * carried over, local `$ref`s are inlined, `type: [x, "null"]` becomes `nullable`, `const` and
 * `oneOf` become `enum` and `anyOf`, and the rest (which only constrains, never describes) is
 * left out; the client still validates what comes back.
 *
 * What inlining builds is counted in `budget` (shared by every schema of one translation): the
 * node count alone let 4,900 `$ref`s to one definition with a 60 KB description become 281 MiB.
 */
export const geminiSchema = (schema: unknown, path = "parameters", budget = new ExpansionBudget()): GeminiSchema => {
  const root = isObject(schema) ? schema : {}
  const definitions = { ...(isObject(root.definitions) ? root.definitions : {}), ...(isObject(root.$defs) ? root.$defs : {}) }
  let nodes = 0
  /** The bytes a string adds to the request Gemini gets (its UTF-16 length: at most 3x off, never under for ASCII). */
  const text = (value: string) => {
    budget.charge(value.length + 8, path)
    return value
  }
  const convert = (node: unknown, depth: number): GeminiSchema => {
    if (++nodes > MAX_SCHEMA_NODES) {
      return refuse(path, `the schema expands to more than ${MAX_SCHEMA_NODES} nodes once its $refs are inlined, which Gemini's schema subset requires`)
    }
    budget.charge(16, path)
    if (!isObject(node) || depth > MAX_DEPTH) return { type: "OBJECT" }
    if (typeof node.$ref === "string") {
      const name = /^#\/(?:\$defs|definitions)\/(.+)$/.exec(node.$ref)?.[1]
      const target = name === undefined ? undefined : definitions[decodeURIComponent(name)]
      return convert(target, depth + 1)
    }
    const out: Record<string, unknown> = {}
    const types = Array.isArray(node.type) ? node.type : node.type === undefined ? [] : [node.type]
    const concrete = types.filter((type) => type !== "null")
    if (concrete.length === 1 && typeof concrete[0] === "string" && TYPES[concrete[0]] !== undefined) out.type = TYPES[concrete[0]]
    if (types.includes("null") && concrete.length > 0) out.nullable = true
    if (types.length === 1 && types[0] === "null") out.type = "NULL"
    if (node.nullable === true) out.nullable = true
    for (const key of ["format", "title", "description", "pattern"] as const) if (typeof node[key] === "string") out[key] = text(node[key])
    for (const key of ["minimum", "maximum"] as const) if (typeof node[key] === "number") out[key] = node[key]
    // int64 fields travel as strings in Google's JSON.
    for (const key of ["minItems", "maxItems", "minLength", "maxLength"] as const) if (typeof node[key] === "number") out[key] = String(node[key])
    if (node.default !== undefined) {
      budget.charge(JSON.stringify(node.default)?.length ?? 0, path)
      out.default = node.default
    }
    const values = Array.isArray(node.enum) ? node.enum : node.const !== undefined ? [node.const] : undefined
    // Gemini's enums are strings only; a numeric enum is left to the description.
    if (values !== undefined && values.every((value) => typeof value === "string")) {
      for (const value of values) text(value)
      out.enum = values
      out.type ??= "STRING"
    }
    if (node.items !== undefined) out.items = convert(node.items, depth + 1)
    if (isObject(node.properties)) {
      out.properties = Object.fromEntries(Object.entries(node.properties).map(([name, value]) => [text(name), convert(value, depth + 1)]))
      out.type ??= "OBJECT"
    }
    if (Array.isArray(node.required)) {
      const known = isObject(node.properties) ? node.properties : {}
      const required = node.required.filter((name): name is string => typeof name === "string" && name in known)
      if (required.length > 0) out.required = required
    }
    const alternatives = Array.isArray(node.anyOf) ? node.anyOf : Array.isArray(node.oneOf) ? node.oneOf : undefined
    if (alternatives !== undefined) {
      const nonNull = alternatives.filter((alternative) => !(isObject(alternative) && alternative.type === "null"))
      if (nonNull.length < alternatives.length) out.nullable = true
      if (nonNull.length === 1) return { ...convert(nonNull[0], depth + 1), ...out }
      out.anyOf = nonNull.map((alternative) => convert(alternative, depth + 1))
    }
    if (Array.isArray(node.allOf) && node.allOf.length === 1) return { ...convert(node.allOf[0], depth + 1), ...out }
    return out as GeminiSchema
  }
  return convert(root, 0)
}

// --- tool call ids ---------------------------------------------------------------------------

const SIGNED = /^call_[A-Za-z0-9]{12}_ts_([A-Za-z0-9_-]+)$/
const ALPHANUMERIC = /[^A-Za-z0-9]/g

/**
 * The id a client sees for one of Gemini's function calls. Gemini gives calls no ids (it pairs
 * results by name and order), but every client format needs one, and a call's
 * `thoughtSignature` must go back with the call in the next turn or Gemini 3 refuses it: so the
 * signature travels inside the id (base64url, after `_ts_`), which every client sends back
 * verbatim with the call and its result. Stateless, so any replica reads it.
 */
export const geminiToolCallId = (signature: string | undefined): string => {
  const nonce = randomBytes(12).toString("base64").replace(ALPHANUMERIC, "").padEnd(12, "0").slice(0, 12)
  if (signature === undefined || signature === "") return `call_${nonce}`
  return `call_${nonce}_ts_${Buffer.from(signature, "base64").toString("base64url")}`
}

/** The `thoughtSignature` a call id carries, if it is one the gateway made with one. */
export const thoughtSignatureOfId = (id: string): string | undefined => {
  const encoded = SIGNED.exec(id)?.[1]
  return encoded === undefined ? undefined : Buffer.from(encoded, "base64url").toString("base64")
}


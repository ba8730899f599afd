/**
 * The Gemini wire types against @google/genai's, checked by the compiler: what the gateway
 * sends fits the SDK's types of the same objects, and what the SDK says Gemini answers fits what
 * the gateway reads. Then the two Gemini rules: the schema subset, and call ids carrying the
 * thoughtSignature.
 */
import type * as Sdk from "@google/genai"
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import { chatRequestToGemini } from "../../src/wire/translate/chat-to-gemini.ts"
import {
  type GeminiContent,
  type GeminiFunctionDeclaration,
  type GeminiGenerationConfig,
  geminiSchema,
  geminiToolCallId,
  MAX_SCHEMA_NODES,
  type GeminiToolConfig,
  type GenerateContentResponse,
  thoughtSignatureOfId
} from "../../src/wire/gemini.ts"

type Fits<A extends B, B> = [A, B]
/** The SDK's enums as the strings they are on the wire. */
type Wire<T> = T extends string ? string : T extends ReadonlyArray<infer U> ? ReadonlyArray<Wire<U>> : T extends object ? { readonly [K in keyof T]: Wire<T[K]> } : T

export type ContentFits = Fits<GeminiContent, Wire<Sdk.Content>>
export type DeclarationFits = Fits<GeminiFunctionDeclaration, Wire<Sdk.FunctionDeclaration>>
export type ToolConfigFits = Fits<GeminiToolConfig, Wire<Sdk.ToolConfig>>
export type GenerationFits = Fits<GeminiGenerationConfig, Wire<Sdk.GenerationConfig>>
// Answers: the usage and a candidate's finish as the SDK reads them (the parts the gateway reads are the request's Part, above).
export type UsageFits = Fits<Wire<Pick<Sdk.GenerateContentResponse, "usageMetadata" | "modelVersion" | "responseId">>, Omit<GenerateContentResponse, "candidates" | "promptFeedback">>
export type CandidateFits = Fits<Wire<Pick<Sdk.Candidate, "finishReason" | "index">>, Omit<NonNullable<GenerateContentResponse["candidates"]>[number], "content">>

describe("geminiSchema", () => {
  it("keeps Gemini's keywords, inlines local refs, and leaves out what Gemini refuses", () => {
    expect(geminiSchema({
      $schema: "http://json-schema.org/draft-07/schema#",
      type: "object",
      additionalProperties: false,
      $defs: { Unit: { type: "string", enum: ["c", "f"] } },
      properties: {
        unit: { $ref: "#/$defs/Unit" },
        days: { type: "integer", minimum: 1, maxItems: 3, exclusiveMaximum: 10 },
        tags: { type: "array", items: { type: "string" }, minItems: 1, uniqueItems: true },
        note: { anyOf: [{ type: "string" }, { type: "null" }] },
        mode: { const: "fast" }
      },
      required: ["unit", "missing"]
    })).toEqual({
      type: "OBJECT",
      properties: {
        unit: { type: "STRING", enum: ["c", "f"] },
        days: { type: "INTEGER", minimum: 1, maxItems: "3" },
        tags: { type: "ARRAY", items: { type: "STRING" }, minItems: "1" },
        note: { type: "STRING", nullable: true },
        mode: { type: "STRING", enum: ["fast"] }
      },
      required: ["unit"]
    })
  })

  it("refuses by name a schema whose $refs would expand beyond the node budget, at once", () => {
    // Each level refers to itself four times: 4^12 nodes at the depth bound, were it only that.
    const branching = { $defs: { T: { type: "object", properties: { a: { $ref: "#/$defs/T" }, b: { $ref: "#/$defs/T" }, c: { $ref: "#/$defs/T" }, d: { $ref: "#/$defs/T" } } } }, type: "object", properties: { tree: { $ref: "#/$defs/T" } } }
    const started = process.cpuUsage()
    const translated = chatRequestToGemini({
      model: "gemini",
      messages: [{ role: "user", content: "hi" }],
      tools: [{ type: "function", function: { name: "grow", parameters: branching } }]
    }, { maxTokensCap: 100 })
    expect(Result.isFailure(translated)).toBe(true)
    if (Result.isFailure(translated)) expect(translated.failure.message).toContain(`${MAX_SCHEMA_NODES} nodes`)
    expect(JSON.stringify(Result.isFailure(translated) ? translated.failure : {})).toContain("tools.0.function.parameters")
    // Refused within the budget's work, not after expanding the tree (CPU, not the wall clock: a
    // loaded machine's worker may wait for a core longer than it computes).
    const spent = process.cpuUsage(started)
    expect((spent.user + spent.system) / 1000).toBeLessThan(1_000)
  })

  it("refuses by name a schema whose inlined $refs would build more bytes than the budget (issue 32.2), and counts every schema of a request together", () => {
    // The red team's shape: thousands of $refs to one definition with a long description. Under
    // the node cap (each use is one node), but every use copies the 60 KB description.
    const description = "d".repeat(60_000)
    const manyRefs = {
      $defs: { Big: { type: "string", description } },
      type: "object",
      properties: Object.fromEntries(Array.from({ length: 4_900 }, (_, i) => [`p${i}`, { $ref: "#/$defs/Big" }]))
    }
    const request = (parameters: Record<string, unknown>) => ({
      model: "gemini",
      messages: [{ role: "user" as const, content: "hi" }],
      tools: [{ type: "function" as const, function: { name: "wide", parameters } }]
    })
    const translated = chatRequestToGemini(request(manyRefs), { maxTokensCap: 100, expansionBytes: 4 * 1_048_576 })
    expect(Result.isFailure(translated)).toBe(true)
    if (Result.isFailure(translated)) {
      expect(translated.failure).toMatchObject({ path: "tools.0.function.parameters", maxBytes: 4 * 1_048_576 })
      expect(translated.failure.message).toContain("more than 4194304 bytes")
    }
    // Fifty uses of it fit (3 MB); two tools of fifty each share one budget and do not.
    const fifty = { ...manyRefs, properties: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`p${i}`, { $ref: "#/$defs/Big" }])) }
    expect(Result.isSuccess(chatRequestToGemini(request(fifty), { maxTokensCap: 100, expansionBytes: 4 * 1_048_576 }))).toBe(true)
    const two = { ...request(fifty), tools: [request(fifty).tools[0]!, { type: "function" as const, function: { name: "again", parameters: fifty } }] }
    const both = chatRequestToGemini(two, { maxTokensCap: 100, expansionBytes: 4 * 1_048_576 })
    expect(Result.isFailure(both) && both.failure.path).toBe("tools.1.function.parameters")
  })

  it("cuts a recursive schema at a bounded depth", () => {
    const node = geminiSchema({ $defs: { N: { type: "object", properties: { next: { $ref: "#/$defs/N" } } } }, $ref: "#/$defs/N" })
    let depth = 0
    for (let at: any = node; at?.properties?.next !== undefined; at = at.properties.next) depth++
    expect(depth).toBeGreaterThan(3)
    expect(depth).toBeLessThan(30)
  })
})

describe("Gemini tool call ids", () => {
  it("carry the thoughtSignature there is, and nothing when there is none", () => {
    const signature = Buffer.from("some opaque signature bytes \u00ff").toString("base64")
    const id = geminiToolCallId(signature)
    expect(id).toMatch(/^call_[A-Za-z0-9]{12}_ts_[A-Za-z0-9_-]+$/)
    expect(thoughtSignatureOfId(id)).toBe(signature)
    expect(geminiToolCallId(undefined)).toMatch(/^call_[A-Za-z0-9]{12}$/)
    expect(thoughtSignatureOfId("call_abc")).toBeUndefined()
    expect(thoughtSignatureOfId("toolu_01ABC")).toBeUndefined()
  })
})

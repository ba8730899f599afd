/**
 * The Converse wire types against @aws-sdk/client-bedrock-runtime's, checked by the compiler
 * (`npm run typecheck`): what the gateway writes fits the SDK's request types, and what the SDK
 * says Bedrock answers fits what the gateway reads, with blobs as the base64 strings they are
 * on the wire. A field renamed or retyped in a new SDK fails here.
 */
import type * as Sdk from "@aws-sdk/client-bedrock-runtime"
import type { DocumentType } from "@smithy/types"
import { describe, expect, it } from "vitest"
import {
  bedrockToolUseId,
  type ConverseRequest,
  type ConverseResponse,
  type CountTokensRequest
} from "../../src/wire/bedrock-converse.ts"

/**
 * A type as JSON carries it: blobs are base64 strings, free-form documents any JSON, and the
 * SDK's `$unknown` members (its catch-all for union members newer than itself) left out.
 */
type Json<T> = [DocumentType] extends [T] ? unknown : JsonEach<T>
type JsonEach<T> = T extends { readonly $unknown: [string, unknown] } ? never
  : [T] extends [Uint8Array] ? string
  : T extends ReadonlyArray<infer U> ? ReadonlyArray<Json<U>>
  : T extends object ? { readonly [K in keyof T]: Json<T[K]> }
  : T

type Fits<A extends B, B> = [A, B]

export type RequestFits = Fits<ConverseRequest, Json<Omit<Sdk.ConverseRequest, "modelId">>>
export type StreamRequestFits = Fits<ConverseRequest, Json<Omit<Sdk.ConverseStreamRequest, "modelId">>>
export type CountTokensFits = Fits<CountTokensRequest, Json<Omit<Sdk.CountTokensRequest, "modelId">>>
export type ResponseFits = Fits<Json<Sdk.ConverseResponse>, ConverseResponse>

describe("Converse ids", () => {
  it("keeps ids Bedrock accepts, and maps others to ones it does, the same way each time", () => {
    expect(bedrockToolUseId("tooluse_AbC-123")).toBe("tooluse_AbC-123")
    const dotted = bedrockToolUseId("functions.Bash:0")
    expect(dotted).toMatch(/^[a-zA-Z0-9_-]{1,64}$/)
    expect(bedrockToolUseId("functions.Bash:0")).toBe(dotted)
    expect(bedrockToolUseId("functions.Bash_0")).not.toBe(dotted)
    expect(bedrockToolUseId("x".repeat(80))).toMatch(/^[a-zA-Z0-9_-]{1,64}$/)
  })
})

/**
 * Google Vertex AI: Anthropic's models through `publishers/anthropic/models/{model}:rawPredict`
 * and `:streamRawPredict` (the Messages body with `anthropic_version: vertex-2023-10-16` and no
 * `model`, which is in the URL), Google's through `publishers/google/models/{model}:
 * generateContent` and the rest of the Gemini client. Every call carries a bearer token from the
 * OAuth2 JWT-bearer grant: an assertion signed with the service account's key (jose) is posted
 * to the `token_uri` of its key file, and the token is kept until five minutes before it expires.
 * One refresh at a time: concurrent calls wait for the same token request.
 */
import { readFileSync } from "node:fs"
import { Effect } from "effect"
import { importPKCS8, SignJWT } from "jose"
import { type Agent, request } from "./undici.ts"
import { ProviderError } from "../../domain/errors.ts"
import { vertexBaseUrl } from "../config/cloud-kinds.ts"
import type { ProviderConfig } from "../config/schema.ts"
import { type AnthropicCall, type AnthropicEndpoint, type FirstByteRecorder, makeAnthropicClient, type VertexClient } from "./clients.ts"
import { type GeminiEndpoint, makeGeminiClient } from "./gemini.ts"
import { makeRedactor, type Redact } from "./redact.ts"
import { transportFailure, type UpstreamFailure } from "./upstream-http.ts"

/** The Messages version Vertex's Claude models take, in the body. */
export const VERTEX_ANTHROPIC_VERSION = "vertex-2023-10-16"
const SCOPE = "https://www.googleapis.com/auth/cloud-platform"
/** A token is renewed this long before Google says it expires. */
const RENEW_BEFORE_MS = 5 * 60_000
/** A token answer is small; anything larger is not one. */
const MAX_TOKEN_ANSWER = 64 * 1024

interface ServiceAccount {
  readonly client_email: string
  readonly private_key: string
  readonly private_key_id?: string
  readonly token_uri: string
}

const readServiceAccount = (file: string): ServiceAccount | string => {
  let parsed: unknown
  try {
    parsed = JSON.parse(readFileSync(file, "utf8"))
  } catch (error) {
    return `the credentials file ${file} cannot be read as JSON (${(error as NodeJS.ErrnoException).code ?? "invalid JSON"})`
  }
  const account = parsed as Partial<ServiceAccount> & { type?: unknown }
  if (account.type !== "service_account" || typeof account.client_email !== "string" || typeof account.private_key !== "string") {
    return `the credentials file ${file} is not a service account key (type service_account, client_email, private_key)`
  }
  if (typeof account.token_uri !== "string" || !/^https?:\/\//.test(account.token_uri)) return `the credentials file ${file} has no token_uri`
  return account as ServiceAccount
}

/** Gets and caches the bearer token; fails as the provider's problem (502), never echoing the key or the token. */
const makeTokenSource = (provider: ProviderConfig, agent: Agent, redact: Redact) => {
  const account = readServiceAccount(provider.credentials_file ?? "")
  let cached: { readonly token: string; readonly renewAt: number } | undefined
  let pending: Promise<string> | undefined
  const fail = (message: string, status: number | null = null) =>
    new ProviderError({
      message: `provider "${provider.name}" could not get an access token: ${message}`,
      details: { provider: provider.name, upstream_status: status, upstream_error: { message } }
    })
  const fetchToken = async (sa: ServiceAccount): Promise<string> => {
    const key = await importPKCS8(sa.private_key, "RS256")
    const assertion = await new SignJWT({ scope: SCOPE })
      .setProtectedHeader({ alg: "RS256", typ: "JWT", ...(sa.private_key_id === undefined ? {} : { kid: sa.private_key_id }) })
      .setIssuer(sa.client_email)
      .setSubject(sa.client_email)
      .setAudience(sa.token_uri)
      .setIssuedAt()
      .setExpirationTime("1h")
      .sign(key)
    const response = await request(sa.token_uri, {
      method: "POST",
      dispatcher: agent,
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ grant_type: "urn:ietf:params:oauth:grant-type:jwt-bearer", assertion }).toString()
    })
    const chunks: Array<Buffer> = []
    let size = 0
    for await (const chunk of response.body) {
      size += (chunk as Buffer).length
      if (size > MAX_TOKEN_ANSWER) {
        response.body.destroy()
        throw fail("the token endpoint's answer is too large", response.statusCode)
      }
      chunks.push(chunk as Buffer)
    }
    const text = Buffer.concat(chunks).toString("utf8")
    let answer: { access_token?: unknown; expires_in?: unknown; error?: unknown; error_description?: unknown } = {}
    try {
      answer = JSON.parse(text) as typeof answer
    } catch {
      // described below
    }
    if (response.statusCode !== 200 || typeof answer.access_token !== "string") {
      const said = typeof answer.error_description === "string" ? answer.error_description : typeof answer.error === "string" ? answer.error : text.slice(0, 200)
      throw fail(redact(`the token endpoint answered ${response.statusCode}: ${said}`), response.statusCode)
    }
    const lifetime = typeof answer.expires_in === "number" ? answer.expires_in * 1000 : 3_600_000
    cached = { token: answer.access_token, renewAt: performance.now() + Math.max(lifetime - RENEW_BEFORE_MS, lifetime / 2) }
    return answer.access_token
  }
  return Effect.suspend((): Effect.Effect<string, UpstreamFailure> => {
    if (typeof account === "string") return Effect.fail(fail(account))
    if (cached !== undefined && performance.now() < cached.renewAt) return Effect.succeed(cached.token)
    pending ??= fetchToken(account).finally(() => {
      pending = undefined
    })
    const shared = pending
    return Effect.tryPromise({
      try: () => shared,
      catch: (error) => (error instanceof ProviderError ? error : transportFailure(provider.name, error))
    })
  })
}

/** A model id as a path segment; `@` stays literal, as in Google's own URLs (`claude-sonnet-4-5@20250929`). */
const modelSegment = (model: string) => encodeURIComponent(model).replaceAll("%40", "@")

export const makeVertexClient = (provider: ProviderConfig, agent: Agent, firstByte?: FirstByteRecorder): VertexClient => {
  const base = vertexBaseUrl(provider)
  const models = `${base}/v1/projects/${encodeURIComponent(provider.project ?? "")}/locations/${encodeURIComponent(provider.location ?? "")}/publishers`
  // Tokens are `ya29.` strings, which the bearer pattern already covers; the private key never leaves this module.
  const redact = makeRedactor([])
  const token = makeTokenSource(provider, agent, redact)
  const bearer = Effect.map(token, (value): Record<string, string> => ({ authorization: `Bearer ${value}` }))
  const server = new URL(base).host
  const gemini: GeminiEndpoint = {
    url: (model, method) => `${models}/google/models/${modelSegment(model)}:${method}`,
    headers: bearer,
    redact,
    server,
    batchEmbed: false,
    // Vertex counts with the request's own fields; generation settings are not counted.
    countBody: (_, { contents, systemInstruction, tools }) => ({
      contents,
      ...(systemInstruction === undefined ? {} : { systemInstruction }),
      ...(tools === undefined ? {} : { tools })
    })
  }
  const anthropicEndpoint = (model: string): AnthropicEndpoint => ({
    server,
    redact,
    prepare: (operation, body, forwarded) =>
      Effect.map(bearer, (headers): AnthropicCall => {
        const { model: _, ...rest } = body
        const beta: Record<string, string> = forwarded["anthropic-beta"] ? { "anthropic-beta": forwarded["anthropic-beta"] } : {}
        // count_tokens has one URL for every model, which therefore stays in the body.
        return operation === "count_tokens"
          ? { url: `${models}/anthropic/models/count-tokens:rawPredict`, headers: { ...headers, ...beta }, body: { ...rest, model, anthropic_version: VERTEX_ANTHROPIC_VERSION } }
          : {
            url: `${models}/anthropic/models/${modelSegment(model)}:${body.stream === true ? "streamRawPredict" : "rawPredict"}`,
            headers: { ...headers, ...beta },
            body: { ...rest, anthropic_version: VERTEX_ANTHROPIC_VERSION }
          }
      })
  })
  return {
    kind: "vertex",
    name: provider.name,
    gemini: makeGeminiClient(provider, agent, firstByte, gemini),
    anthropicFor: (model) => makeAnthropicClient(provider, agent, {}, firstByte, anthropicEndpoint(model))
  }
}

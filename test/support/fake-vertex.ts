// A fake Vertex AI: the OAuth2 token endpoint of a service account (it verifies the JWT-bearer
// assertion's RS256 signature against the account's public key, its issuer, audience, scope and
// lifetime, and issues short bearer tokens), Anthropic's publisher routes (`:rawPredict`,
// `:streamRawPredict`: the body must carry `anthropic_version: vertex-2023-10-16` and no
// `model`, and no system turn or turn's `output_config` in `messages`) in front of the fake Anthropic, and Google's publisher routes served by the fake
// Gemini in its Vertex mode. Only tokens it issued are accepted.
import { generateKeyPairSync, randomBytes, type KeyObject } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { importSPKI, jwtVerify } from "jose"
import { startFakeAnthropic } from "./fake-anthropic.ts"
import type { FakeUpstream, RecordedRequest } from "./fake-common.ts"
import { type FakeGemini, startFakeGemini } from "./fake-gemini.ts"

export interface FakeVertex {
  readonly url: string
  readonly tokenUri: string
  /** The service account key file's JSON (write it to a file for the gateway). */
  readonly serviceAccount: Record<string, string>
  /** Requests to the publisher routes and the token endpoint, as received. */
  readonly requests: ReadonlyArray<RecordedRequest>
  /** How many tokens were issued. */
  readonly tokensIssued: () => number
  readonly anthropic: FakeUpstream
  readonly gemini: FakeGemini
  reset(): void
  close(): Promise<void>
}

const ANTHROPIC_KEY = "sk-ant-behind-vertex-0000000000"

/**
 * What Vertex's Claude refuses of Anthropic's newer Messages format (issue 34, measured against
 * Vertex): a `role: "system"` turn inside `messages` and a turn's own `output_config`, each by
 * name, as Anthropic's API accepts both.
 */
const vertexRefuses = (body: Record<string, any>): string | undefined => {
  const messages: Array<unknown> = Array.isArray(body.messages) ? body.messages : []
  for (const [index, message] of messages.entries()) {
    if (typeof message !== "object" || message === null) continue
    const turn = message as Record<string, unknown>
    if (turn.role !== "user" && turn.role !== "assistant") return `messages.${index}.role: Input should be 'user' or 'assistant'`
    if ("output_config" in turn) return `messages.${index}.output_config: Extra inputs are not permitted`
  }
  return undefined
}

export const startFakeVertex = async (options: {
  readonly project: string
  readonly location: string
  readonly claude: ReadonlyArray<string>
  readonly gemini: ReadonlyArray<string>
}): Promise<FakeVertex> => {
  const { privateKey, publicKey } = generateKeyPairSync("rsa", { modulusLength: 2048 }) as { privateKey: KeyObject; publicKey: KeyObject }
  const verifyKey = await importSPKI(publicKey.export({ type: "spki", format: "pem" }).toString(), "RS256")
  const tokens = new Set<string>()
  let issued = 0
  const anthropic = await startFakeAnthropic({ apiKey: ANTHROPIC_KEY, models: [...options.claude] })
  const gemini = await startFakeGemini({
    models: options.gemini,
    vertex: { project: options.project, location: options.location, tokenValid: (token) => tokens.has(token) }
  })
  const requests: Array<RecordedRequest> = []
  let tokenUri = ""
  const email = `gateway@${options.project}.iam.gserviceaccount.com`
  const prefix = `/v1/projects/${options.project}/locations/${options.location}/publishers/`

  const send = (res: http.ServerResponse, status: number, body: unknown) => {
    const text = JSON.stringify(body)
    res.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)) })
    res.end(text)
  }

  const issue = async (res: http.ServerResponse, raw: string) => {
    const form = new URLSearchParams(raw)
    if (form.get("grant_type") !== "urn:ietf:params:oauth:grant-type:jwt-bearer") {
      return send(res, 400, { error: "unsupported_grant_type", error_description: "Invalid grant_type" })
    }
    try {
      const { payload } = await jwtVerify(form.get("assertion") ?? "", verifyKey, { issuer: email, audience: tokenUri, algorithms: ["RS256"], maxTokenAge: "1h" })
      if (payload.scope !== "https://www.googleapis.com/auth/cloud-platform") return send(res, 400, { error: "invalid_scope", error_description: "Invalid OAuth scope." })
    } catch {
      return send(res, 400, { error: "invalid_grant", error_description: "Invalid JWT Signature." })
    }
    const token = `ya29.${randomBytes(24).toString("base64url")}`
    tokens.add(token)
    issued++
    return send(res, 200, { access_token: token, expires_in: 3599, token_type: "Bearer" })
  }

  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const raw = Buffer.concat(chunks).toString("utf8")
      let body: Record<string, any> | undefined
      try {
        body = JSON.parse(raw)
      } catch {
        body = undefined
      }
      requests.push({ method: req.method ?? "GET", path: req.url ?? "/", headers: req.headers, body, rawBody: raw })
      void route(req, res, raw, body).catch((error: unknown) => send(res, 500, { error: { code: 500, message: String(error), status: "INTERNAL" } }))
    })
  })

  const route = async (req: http.IncomingMessage, res: http.ServerResponse, raw: string, body: Record<string, any> | undefined) => {
    const url = new URL(req.url ?? "/", "http://fake")
    if (url.pathname === "/token") return issue(res, raw)
    if (!url.pathname.startsWith(prefix)) return send(res, 404, { error: { code: 404, message: "Not found", status: "NOT_FOUND" } })
    const rest = url.pathname.slice(prefix.length)
    // Google's models: the fake Gemini checks the token and the rest itself.
    if (rest.startsWith("google/")) return pipe(req, res, `${gemini.url}${url.pathname}${url.search}`, raw, { authorization: String(req.headers.authorization ?? "") })
    const match = /^anthropic\/models\/([^/:]+):(rawPredict|streamRawPredict)$/.exec(decodeURIComponent(rest))
    if (match === null) return send(res, 404, { error: { code: 404, message: "Not found", status: "NOT_FOUND" } })
    const token = /^Bearer (.+)$/.exec(String(req.headers.authorization ?? ""))?.[1]
    if (token === undefined || !tokens.has(token)) {
      return send(res, 401, { error: { code: 401, message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.", status: "UNAUTHENTICATED" } })
    }
    if (body === undefined) return send(res, 400, { error: { code: 400, message: "Invalid JSON payload received.", status: "INVALID_ARGUMENT" } })
    const [, model, method] = match
    const refused = vertexRefuses(body)
    if (refused !== undefined) return send(res, 400, { type: "error", error: { type: "invalid_request_error", message: refused } })
    if (model === "count-tokens") {
      const { anthropic_version: _, ...forwarded } = body
      return pipe(req, res, `${anthropic.url}/v1/messages/count_tokens`, JSON.stringify(forwarded), anthropicHeaders(req))
    }
    if (!options.claude.includes(model!)) {
      return send(res, 404, { error: { code: 404, message: `Publisher Model \`projects/${options.project}/locations/${options.location}/publishers/anthropic/models/${model}\` not found.`, status: "NOT_FOUND" } })
    }
    if (body.anthropic_version !== "vertex-2023-10-16") {
      return send(res, 400, { type: "error", error: { type: "invalid_request_error", message: "anthropic_version: Input should be 'vertex-2023-10-16'" } })
    }
    if ("model" in body) return send(res, 400, { type: "error", error: { type: "invalid_request_error", message: "model: Extra inputs are not permitted" } })
    if ((method === "streamRawPredict") !== (body.stream === true)) {
      return send(res, 400, { error: { code: 400, message: `${method} with stream ${String(body.stream)}`, status: "FAILED_PRECONDITION" } })
    }
    const { anthropic_version: _, ...forwarded } = body
    return pipe(req, res, `${anthropic.url}/v1/messages`, JSON.stringify({ ...forwarded, model }), anthropicHeaders(req))
  }

  const anthropicHeaders = (req: http.IncomingMessage): Record<string, string> => ({
    "x-api-key": ANTHROPIC_KEY,
    "anthropic-version": "2023-06-01",
    ...(req.headers["anthropic-beta"] === undefined ? {} : { "anthropic-beta": String(req.headers["anthropic-beta"]) })
  })

  const pipe = async (req: http.IncomingMessage, res: http.ServerResponse, target: string, body: string, headers: Record<string, string>) => {
    const upstream = await fetch(target, { method: req.method ?? "POST", headers: { "content-type": "application/json", ...headers }, body })
    res.writeHead(upstream.status, { "content-type": upstream.headers.get("content-type") ?? "application/json" })
    try {
      for await (const chunk of upstream.body as unknown as AsyncIterable<Uint8Array>) res.write(chunk)
    } catch {
      // The upstream fake reset its stream (a `then: "destroy"` scenario): so does Vertex's answer.
      res.destroy()
      return
    }
    res.end()
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  tokenUri = `${url}/token`
  return {
    url,
    tokenUri,
    serviceAccount: {
      type: "service_account",
      project_id: options.project,
      private_key_id: randomBytes(20).toString("hex"),
      private_key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
      client_email: email,
      client_id: "123456789012345678901",
      token_uri: tokenUri
    },
    requests,
    tokensIssued: () => issued,
    anthropic,
    gemini,
    reset: () => {
      requests.length = 0
      anthropic.reset()
      gemini.reset()
    },
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
      await anthropic.close()
      await gemini.close()
    }
  }
}

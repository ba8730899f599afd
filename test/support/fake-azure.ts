// A fake Azure OpenAI resource: Azure's envelope (deployment routes, the `api-version` query, the
// `api-key` header, Azure's own 401 and DeploymentNotFound answers, the prompt filter results in
// answers and the stream's opening chunk without choices, the Responses fields it refuses) in front of the fake OpenAI upstreams,
// which validate and answer the OpenAI format itself (Azure serves that format unchanged).
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { type FakeUpstream, type JsonBody, type RecordedRequest, startFakeOpenAI } from "./fake-openai.ts"
import { startFakeOpenAIResponses } from "./fake-openai-responses.ts"

export interface FakeAzureOptions {
  readonly apiKey: string
  /** Deployment names; any other is Azure's DeploymentNotFound. */
  readonly deployments: ReadonlyArray<string>
}

export interface FakeAzure {
  /** The resource endpoint (`https://RESOURCE.openai.azure.com` in real life). */
  readonly url: string
  /** Every request as Azure received it (path with its query, headers, body). */
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Chat Completions behind the deployments: enqueue its scenarios here. */
  readonly chat: FakeUpstream
  /** Responses and embeddings: enqueue their scenarios here. */
  readonly openai: FakeUpstream
  reset(): void
  close(): Promise<void>
}

/** Data-plane API versions Azure serves (the dated GA and preview ones a client may pin). */
const API_VERSION = /^\d{4}-\d{2}-\d{2}(?:-preview)?$/

/** Fields OpenAI's Responses API takes that Azure's answers `400 Unknown parameter` to. */
const AZURE_UNKNOWN_RESPONSES_FIELDS = ["client_metadata"]

const FILTERED_OK = {
  hate: { filtered: false, severity: "safe" },
  self_harm: { filtered: false, severity: "safe" },
  sexual: { filtered: false, severity: "safe" },
  violence: { filtered: false, severity: "safe" }
}
const PROMPT_FILTER = [{ prompt_index: 0, content_filter_results: FILTERED_OK }]

const azureError = (res: http.ServerResponse, status: number, code: string, message: string) => {
  const text = JSON.stringify({ error: { code, message } })
  res.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)), "apim-request-id": "fake-apim" })
  res.end(text)
}

/** Azure adds its content filter verdicts to every choice of an answer or chunk. */
const withFilterResults = (payload: JsonBody): JsonBody =>
  Array.isArray(payload.choices)
    ? { ...payload, choices: payload.choices.map((choice: JsonBody) => ({ ...choice, content_filter_results: {} })) }
    : payload

export const startFakeAzure = async (options: FakeAzureOptions): Promise<FakeAzure> => {
  const chat = await startFakeOpenAI({ apiKey: options.apiKey })
  const openai = await startFakeOpenAIResponses({ apiKey: options.apiKey })
  const requests: Array<RecordedRequest> = []
  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const rawBody = Buffer.concat(chunks).toString("utf8")
      let body: JsonBody | undefined
      try {
        body = rawBody === "" ? undefined : JSON.parse(rawBody)
      } catch {
        body = undefined
      }
      requests.push({ method: req.method ?? "GET", path: req.url ?? "/", headers: req.headers, body, rawBody })
      void handle(req, res, body, rawBody).catch((error: unknown) => azureError(res, 500, "InternalServerError", String(error)))
    })
  })

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse, body: JsonBody | undefined, rawBody: string) => {
    const url = new URL(req.url ?? "/", "http://fake")
    const version = url.searchParams.get("api-version")
    const deployment = /^\/openai\/deployments\/([^/]+)\/(chat\/completions|embeddings)$/.exec(url.pathname)
    const responses = url.pathname === "/openai/responses"
    if (req.method !== "POST" || (deployment === null && !responses) || version === null) {
      return azureError(res, 404, "404", "Resource not found")
    }
    if (!API_VERSION.test(version)) return azureError(res, 400, "BadRequest", "API version not supported")
    if (req.headers["api-key"] !== options.apiKey) {
      return azureError(
        res,
        401,
        "401",
        "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."
      )
    }
    const name = deployment !== null ? decodeURIComponent(deployment[1]!) : String(body?.model ?? "")
    if (!options.deployments.includes(name)) {
      return azureError(
        res,
        404,
        "DeploymentNotFound",
        "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."
      )
    }
    // Azure's Responses API is OpenAI's minus some fields, which it refuses by name (issue 34:
    // Codex's `client_metadata`, measured against Azure).
    const unknown = responses && body !== undefined ? AZURE_UNKNOWN_RESPONSES_FIELDS.find((field) => field in body) : undefined
    if (unknown !== undefined) {
      const text = JSON.stringify({ error: { message: `Unknown parameter: '${unknown}'.`, type: "invalid_request_error", param: unknown, code: "unknown_parameter" } })
      res.writeHead(400, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)) })
      return res.end(text)
    }
    // The deployment decides the model: the body's `model`, if any, is not Azure's concern.
    const forwarded = body !== undefined && typeof body === "object" ? JSON.stringify({ ...body, model: name }) : rawBody
    const target = deployment === null
      ? `${openai.url}/responses`
      : deployment[2] === "embeddings"
      ? `${openai.url}/embeddings`
      : `${chat.url}/chat/completions`
    const upstream = await fetch(target, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${options.apiKey}` },
      body: forwarded
    })
    const type = upstream.headers.get("content-type") ?? "application/json"
    const isChat = deployment !== null && deployment[2] === "chat/completions"
    if (!type.startsWith("text/event-stream")) {
      const text = await upstream.text()
      let out = text
      if (isChat && upstream.ok) out = JSON.stringify({ ...withFilterResults(JSON.parse(text) as JsonBody), prompt_filter_results: PROMPT_FILTER })
      res.writeHead(upstream.status, { "content-type": type, "content-length": String(Buffer.byteLength(out)) })
      return res.end(out)
    }
    res.writeHead(upstream.status, { "content-type": type, "cache-control": "no-cache" })
    if (isChat) {
      // Azure's stream opens with the prompt's filter verdicts in a chunk without choices.
      res.write(`data: ${JSON.stringify({ choices: [], created: 0, id: "", model: "", object: "", prompt_filter_results: PROMPT_FILTER })}\n\n`)
    }
    const decoder = new TextDecoder()
    let buffered = ""
    for await (const bytes of upstream.body as unknown as AsyncIterable<Uint8Array>) {
      buffered += decoder.decode(bytes, { stream: true })
      let end: number
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        const frame = buffered.slice(0, end + 2)
        buffered = buffered.slice(end + 2)
        const data = /^data: (\{.*\})$/m.exec(frame)?.[1]
        res.write(isChat && data !== undefined ? frame.replace(data, JSON.stringify(withFilterResults(JSON.parse(data) as JsonBody))) : frame)
      }
    }
    res.end(buffered)
  }

  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    chat,
    openai,
    reset: () => {
      requests.length = 0
      chat.reset()
      openai.reset()
    },
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
      await chat.close()
      await openai.close()
    }
  }
}

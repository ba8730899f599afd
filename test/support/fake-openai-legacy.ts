/**
 * A fake of OpenAI's legacy completions and moderations endpoints, in the exact shapes of the
 * `openai` SDK's `Completion` (and its streamed chunks, `data: [DONE]` last) and
 * `ModerationCreateResponse`. It refuses a wrong key (401) and a body without its required
 * fields (400, OpenAI's error body), and records every request.
 */
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"

export interface LegacyRequest {
  readonly path: string
  readonly body: Record<string, any>
}

export interface FakeLegacy {
  readonly url: string
  readonly requests: Array<LegacyRequest>
  readonly close: () => Promise<void>
}

const error = (message: string, param: string | null, code: string | null, type = "invalid_request_error") => ({
  error: { message, type, param, code }
})

const completion = (body: Record<string, any>) => {
  const prompt = Array.isArray(body.prompt) ? String(body.prompt[0]) : String(body.prompt)
  const text = ` continued(${prompt})`
  return {
    id: "cmpl-fake0123456789",
    object: "text_completion",
    created: 1_795_000_000,
    model: body.model,
    system_fingerprint: "fp_fake",
    choices: [{ text, index: 0, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: prompt.split(/\s+/).length, completion_tokens: 2, total_tokens: prompt.split(/\s+/).length + 2 }
  }
}

const moderation = (body: Record<string, any>) => {
  const inputs: Array<unknown> = Array.isArray(body.input) ? body.input : [body.input]
  const categories = { harassment: false, "harassment/threatening": false, hate: false, "hate/threatening": false, illicit: false, "illicit/violent": false, "self-harm": false, "self-harm/instructions": false, "self-harm/intent": false, sexual: false, "sexual/minors": false, violence: false, "violence/graphic": false }
  const scores = Object.fromEntries(Object.keys(categories).map((name) => [name, 0.0001]))
  return {
    id: "modr-fake0123456789",
    model: body.model ?? "omni-moderation-latest",
    results: inputs.map((input) => {
      const flagged = typeof input === "string" && input.includes("kill")
      return {
        flagged,
        categories: { ...categories, violence: flagged },
        category_scores: { ...scores, violence: flagged ? 0.97 : 0.0001 },
        category_applied_input_types: Object.fromEntries(Object.keys(categories).map((name) => [name, ["text"]]))
      }
    })
  }
}

export const startFakeOpenAILegacy = async (options: { readonly apiKey: string }): Promise<FakeLegacy> => {
  const requests: Array<LegacyRequest> = []
  const server = createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const send = (status: number, value: unknown) => {
        res.writeHead(status, { "content-type": "application/json" })
        res.end(JSON.stringify(value))
      }
      if (req.headers.authorization !== `Bearer ${options.apiKey}`) {
        return send(401, error("Incorrect API key provided.", null, "invalid_api_key"))
      }
      const path = (req.url ?? "/").split("?")[0]!
      let body: Record<string, any>
      try {
        body = JSON.parse(Buffer.concat(chunks).toString("utf8"))
      } catch {
        return send(400, error("We could not parse the JSON body of your request.", null, null))
      }
      requests.push({ path, body })
      if (req.method === "POST" && path === "/v1/moderations") {
        if (body.input === undefined) return send(400, error("Missing required parameter: 'input'.", "input", "missing_required_parameter"))
        return send(200, moderation(body))
      }
      if (req.method !== "POST" || path !== "/v1/completions") return send(404, error(`Invalid URL (${req.method} ${path})`, null, null))
      if (typeof body.model !== "string") return send(400, error("Missing required parameter: 'model'.", "model", "missing_required_parameter"))
      if (body.prompt === undefined) return send(400, error("Missing required parameter: 'prompt'.", "prompt", "missing_required_parameter"))
      const answer = completion(body)
      if (body.stream !== true) return send(200, answer)
      res.writeHead(200, { "content-type": "text/event-stream" })
      const text = answer.choices[0]!.text
      const pieces = [text.slice(0, 5), text.slice(5)]
      for (const [i, piece] of pieces.entries()) {
        const last = i === pieces.length - 1
        res.write(`data: ${JSON.stringify({ ...answer, usage: null, choices: [{ text: piece, index: 0, logprobs: null, finish_reason: last ? "stop" : null }] })}\n\n`)
      }
      if (body.stream_options?.include_usage === true) res.write(`data: ${JSON.stringify({ ...answer, choices: [] })}\n\n`)
      res.end("data: [DONE]\n\n")
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve()))
  }
}

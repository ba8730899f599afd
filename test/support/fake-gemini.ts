// A fake Gemini upstream: the Gemini API's routes (`/v1beta/models/{model}:{method}`, key in
// `x-goog-api-key`) or, with `vertex`, Vertex AI's Google publisher routes with a bearer token.
// It refuses what Gemini refuses (unknown fields, JSON Schema keywords outside Gemini's subset in
// function parameters, a function response without its call, a Gemini 3 function call sent back
// without its thoughtSignature) and answers in Gemini's exact JSON and `alt=sse` stream: function
// calls whole, without ids, the first one signed; usage on every event.
import { countWords, isRecord, longText, randomId, splitWords, startFake, writeFrames } from "./fake-common.ts"
import type { FakeUpstream, JsonBody, RecordedRequest, Refusal, ResponseContext, Scenario, TextScenario, ToolCallsScenario } from "./fake-common.ts"

export interface FakeGeminiOptions {
  /** The Gemini API key it accepts (Gemini API routes). */
  readonly apiKey?: string
  /** Vertex AI routes instead: the project, location and a check of the bearer token. */
  readonly vertex?: { readonly project: string; readonly location: string; readonly tokenValid: (token: string) => boolean }
  /** Models it serves; any other is Gemini's 404. */
  readonly models: ReadonlyArray<string>
  /** Models that, like Gemini 3, refuse a function call in the history without its thoughtSignature. */
  readonly signing?: ReadonlyArray<string>
}

export interface FakeGemini extends FakeUpstream {
  /** The signature the fake puts on the first function call of an answer. */
  readonly signature: string
}

const REQUEST_FIELDS = new Set(["contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings", "cachedContent", "labels"])
const PART_FIELDS = new Set(["text", "thought", "thoughtSignature", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode", "codeExecutionResult", "videoMetadata"])
const GENERATION_FIELDS = new Set([
  "maxOutputTokens", "temperature", "topP", "topK", "stopSequences", "seed", "presencePenalty", "frequencyPenalty", "responseMimeType",
  "responseSchema", "responseJsonSchema", "thinkingConfig", "candidateCount", "responseLogprobs", "logprobs", "responseModalities"
])
// Google's Schema message (the SDK's `Schema` interface).
const SCHEMA_FIELDS = new Set([
  "type", "format", "title", "description", "nullable", "enum", "items", "minItems", "maxItems", "properties", "required", "propertyOrdering",
  "anyOf", "minimum", "maximum", "minLength", "maxLength", "pattern", "default", "example", "minProperties", "maxProperties"
])
const TYPES = new Set(["TYPE_UNSPECIFIED", "STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"])
const METHODS = new Set(["generateContent", "streamGenerateContent", "countTokens", "batchEmbedContents"])
const SIGNATURE = Buffer.from("fake-thought-signature-0123456789").toString("base64")

const googleError = (status: number, code: string, message: string, details?: Array<JsonBody>): Refusal => ({
  status,
  body: { error: { code: status, message, status: code, ...(details === undefined ? {} : { details }) } }
})
const invalid = (message: string) => googleError(400, "INVALID_ARGUMENT", message)
const unknownField = (name: string, at: string) =>
  invalid(`Invalid JSON payload received. Unknown name "${name}" at '${at}': Cannot find field.`)

const snake = (name: string) => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)

const checkSchema = (schema: unknown, at: string): Refusal | undefined => {
  if (!isRecord(schema)) return invalid(`Invalid value at '${at}': expected an object`)
  for (const key of Object.keys(schema)) if (!SCHEMA_FIELDS.has(key)) return unknownField(key, at)
  if (schema.type !== undefined && !TYPES.has(String(schema.type))) {
    return invalid(`Invalid value at '${at}.type' (type.googleapis.com/google.ai.generativelanguage.v1beta.Type), "${String(schema.type)}"`)
  }
  for (const [name, value] of Object.entries(isRecord(schema.properties) ? schema.properties : {})) {
    const refusal = checkSchema(value, `${at}.properties[${name}].value`)
    if (refusal) return refusal
  }
  if (schema.items !== undefined) return checkSchema(schema.items, `${at}.items`)
  for (const [i, alternative] of (Array.isArray(schema.anyOf) ? schema.anyOf : []).entries()) {
    const refusal = checkSchema(alternative, `${at}.any_of[${i}]`)
    if (refusal) return refusal
  }
  return undefined
}

interface Target {
  readonly model: string
  readonly method: string
  readonly sse: boolean
}

const refuse = (req: RecordedRequest, options: FakeGeminiOptions, targets: WeakMap<object, Target>): Refusal | undefined => {
  const url = new URL(req.path, "http://fake")
  const prefix = options.vertex === undefined
    ? "/v1beta/models/"
    : `/v1/projects/${options.vertex.project}/locations/${options.vertex.location}/publishers/google/models/`
  const route = url.pathname.startsWith(prefix) ? /^([^/:]+):([A-Za-z]+)$/.exec(decodeURIComponent(url.pathname.slice(prefix.length))) : null
  if (req.method !== "POST" || route === null || !METHODS.has(route[2]!)) return googleError(404, "NOT_FOUND", `The requested URL ${url.pathname} was not found on this server.`)
  if (options.vertex === undefined) {
    const key = req.headers["x-goog-api-key"]
    if (key !== options.apiKey) {
      return key === undefined
        ? googleError(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")
        : googleError(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.", [{ "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "API_KEY_INVALID", domain: "googleapis.com" }])
    }
  } else {
    const token = /^Bearer (.+)$/.exec(String(req.headers.authorization ?? ""))?.[1]
    if (token === undefined || !options.vertex.tokenValid(token)) {
      return googleError(401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
    }
  }
  const [, model, method] = route
  if (!options.models.includes(model!)) {
    return googleError(404, "NOT_FOUND", `models/${model} is not found for API version v1beta, or is not supported for ${method}. Call ListModels to see the list of available models and their supported methods.`)
  }
  const body = req.body
  if (!isRecord(body)) return invalid("Invalid JSON payload received.")
  if (method === "streamGenerateContent" && url.searchParams.get("alt") !== "sse") {
    // Without alt=sse Gemini streams one JSON array; the gateway never asks for that.
    return invalid("the fake serves streamGenerateContent with alt=sse only")
  }
  targets.set(body, { model: model!, method: method!, sse: method === "streamGenerateContent" })
  if (method === "batchEmbedContents") return checkEmbeddings(body, model!)
  const request = method === "countTokens" && options.vertex === undefined
    ? (isRecord(body.generateContentRequest) ? body.generateContentRequest : body)
    : body
  return checkGenerate(request, method === "countTokens", options.signing?.includes(model!) === true)
}

const checkEmbeddings = (body: JsonBody, model: string): Refusal | undefined => {
  if (!Array.isArray(body.requests) || body.requests.length === 0) return invalid("* BatchEmbedContentsRequest.requests: contents is not specified")
  for (const [i, request] of body.requests.entries()) {
    if (!isRecord(request) || request.model !== `models/${model}`) {
      return invalid(`* BatchEmbedContentsRequest.requests[${i}].model: unexpected model name format`)
    }
    if (!isRecord(request.content) || !Array.isArray(request.content.parts)) return invalid(`* BatchEmbedContentsRequest.requests[${i}].content: contents is not specified`)
  }
  return undefined
}

const checkGenerate = (body: JsonBody, counting: boolean, signing: boolean): Refusal | undefined => {
  for (const key of Object.keys(body)) if (!REQUEST_FIELDS.has(key) && !(counting && key === "model")) return unknownField(key, "")
  if (!Array.isArray(body.contents) || body.contents.length === 0) return invalid("* GenerateContentRequest.contents: contents is not specified")
  let previous: JsonBody | undefined
  for (const [i, content] of body.contents.entries()) {
    if (!isRecord(content) || !Array.isArray(content.parts) || content.parts.length === 0) {
      return invalid(`* GenerateContentRequest.contents[${i}].parts: contents.parts must not be empty.`)
    }
    if (content.role !== "user" && content.role !== "model") return invalid(`Please use a valid role: user, model.`)
    let firstCall = true
    for (const [j, part] of content.parts.entries()) {
      if (!isRecord(part)) return invalid(`Invalid value at 'contents[${i}].parts[${j}]'`)
      for (const key of Object.keys(part)) if (!PART_FIELDS.has(key)) return unknownField(key, `contents[${i}].parts[${j}]`)
      if (isRecord(part.functionCall)) {
        if (content.role !== "model") return invalid("Please ensure that function call turn comes immediately after a user turn or after a function response turn.")
        if (signing && firstCall && typeof part.thoughtSignature !== "string") {
          return invalid(`Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call \`default_api:${String(part.functionCall.name)}\` , position ${j + 1}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.`)
        }
        if (typeof part.thoughtSignature === "string" && part.thoughtSignature !== SIGNATURE) return invalid("Corrupted thought signature.")
        firstCall = false
      }
      if (isRecord(part.functionResponse)) {
        const called = (previous?.parts as Array<JsonBody> | undefined)?.some((p) => isRecord(p.functionCall) && p.functionCall.name === (part.functionResponse as JsonBody).name)
        if (previous?.role !== "model" || !called) {
          return invalid("Please ensure that function response turn comes immediately after a function call turn.")
        }
        if (!isRecord(part.functionResponse.response)) return invalid(`Invalid value at 'contents[${i}].parts[${j}].function_response.response'`)
      }
    }
    previous = content
  }
  for (const [i, tool] of (Array.isArray(body.tools) ? body.tools : []).entries()) {
    for (const [j, declaration] of (isRecord(tool) && Array.isArray(tool.functionDeclarations) ? tool.functionDeclarations : []).entries()) {
      if (!isRecord(declaration) || typeof declaration.name !== "string" || !/^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$/.test(declaration.name)) {
        return invalid(`* GenerateContentRequest.tools[${i}].function_declarations[${j}].name: Invalid function name.`)
      }
      if (declaration.parameters !== undefined) {
        const refusal = checkSchema(declaration.parameters, `tools[${i}].function_declarations[${j}].parameters`)
        if (refusal) return refusal
      }
    }
  }
  const config = isRecord(body.generationConfig) ? body.generationConfig : {}
  for (const key of Object.keys(config)) if (!GENERATION_FIELDS.has(key)) return unknownField(snake(key), "generation_config")
  if (config.responseSchema !== undefined) {
    const refusal = checkSchema(config.responseSchema, "generation_config.response_schema")
    if (refusal) return refusal
  }
  if (typeof config.temperature === "number" && (config.temperature < 0 || config.temperature > 2)) return invalid("* GenerateContentRequest.generation_config.temperature: must be in [0, 2]")
  return undefined
}

// --- answers ---------------------------------------------------------------------------------

const promptWords = (body: JsonBody): number => {
  let words = 0
  for (const content of [...(body.systemInstruction ? [body.systemInstruction] : []), ...(body.contents ?? [])] as Array<JsonBody>) {
    for (const part of content.parts as Array<JsonBody>) {
      if (typeof part.text === "string") words += countWords(part.text)
      if (isRecord(part.functionResponse)) words += countWords(JSON.stringify(part.functionResponse.response))
    }
  }
  return words
}

const lastUserText = (body: JsonBody): string => {
  const contents = (body.contents ?? []) as Array<JsonBody>
  const last = [...contents].reverse().find((content) => content.role === "user")
  return ((last?.parts ?? []) as Array<JsonBody>).map((part) => part.text ?? "").join("")
}

const usageOf = (body: JsonBody, output: number, scenario: TextScenario | ToolCallsScenario): JsonBody => {
  const prompt = scenario.usage?.input ?? promptWords(body)
  const out = scenario.usage?.output ?? Math.max(1, output)
  return {
    promptTokenCount: prompt,
    candidatesTokenCount: out,
    totalTokenCount: prompt + out + (scenario.usage?.thoughts ?? 0),
    ...(scenario.usage?.cacheRead === undefined ? {} : { cachedContentTokenCount: scenario.usage.cacheRead }),
    ...(scenario.usage?.thoughts === undefined ? {} : { thoughtsTokenCount: scenario.usage.thoughts }),
    promptTokensDetails: [{ modality: "TEXT", tokenCount: prompt }]
  }
}

const FINISH: Record<string, string> = { stop: "STOP", length: "MAX_TOKENS", content_filter: "SAFETY", tool_calls: "STOP" }

const callParts = (scenario: ToolCallsScenario): Array<JsonBody> =>
  scenario.calls.map((call, i) => ({ functionCall: { name: call.name, args: call.arguments }, ...(i === 0 ? { thoughtSignature: SIGNATURE } : {}) }))

const envelope = (candidate: JsonBody | undefined, usage: JsonBody, responseId: string, model: string): JsonBody => ({
  ...(candidate === undefined ? {} : { candidates: [{ index: 0, ...candidate }] }),
  usageMetadata: usage,
  modelVersion: model,
  responseId
})

const respond = async (ctx: ResponseContext, scenario: Scenario, target: Target): Promise<void> => {
  const body = ctx.body
  const responseId = randomId(22)
  if (target.method === "countTokens") {
    const request = isRecord(body.generateContentRequest) ? body.generateContentRequest : body
    return ctx.sendJson(200, { totalTokens: promptWords(request), promptTokensDetails: [{ modality: "TEXT", tokenCount: promptWords(request) }] })
  }
  if (target.method === "batchEmbedContents" && scenario.kind !== "error") {
    return ctx.sendJson(200, {
      embeddings: (body.requests as Array<JsonBody>).map((request) => {
        const text = (request.content.parts as Array<JsonBody>).map((part) => part.text ?? "").join("")
        const size = typeof request.outputDimensionality === "number" ? request.outputDimensionality : 8
        return { values: Array.from({ length: size }, (_, i) => ((text.length + i) % 7) / 7) }
      })
    })
  }
  switch (scenario.kind) {
    case "text":
    case "tool_calls": {
      const text = scenario.kind === "text" ? scenario.text : scenario.text ?? ""
      const calls = scenario.kind === "tool_calls" ? callParts(scenario) : []
      const finish = FINISH[scenario.kind === "text" ? scenario.finish ?? "stop" : "tool_calls"] ?? String((scenario as TextScenario).finish)
      const usage = usageOf(body, countWords(text) + calls.length, scenario)
      if (!target.sse) {
        const parts = [...(text === "" ? [] : [{ text }]), ...calls]
        return ctx.sendJson(200, envelope({ content: { role: "model", parts }, finishReason: finish }, usage, responseId, target.model))
      }
      const frames: Array<string> = []
      const words = splitWords(text)
      const partial = { ...usage, candidatesTokenCount: undefined, thoughtsTokenCount: undefined, totalTokenCount: usage.promptTokenCount }
      words.forEach((word, i) => {
        const last = i === words.length - 1 && calls.length === 0
        frames.push(`data: ${JSON.stringify(envelope({ content: { role: "model", parts: [{ text: word }] }, ...(last ? { finishReason: finish } : {}) }, last ? usage : partial, responseId, target.model))}\r\n\r\n`)
      })
      if (calls.length > 0) frames.push(`data: ${JSON.stringify(envelope({ content: { role: "model", parts: calls }, finishReason: finish }, usage, responseId, target.model))}\r\n\r\n`)
      if (frames.length === 0) frames.push(`data: ${JSON.stringify(envelope({ content: { role: "model", parts: [{ text: "" }] }, finishReason: finish }, usage, responseId, target.model))}\r\n\r\n`)
      ctx.startStream()
      await writeFrames(ctx, frames, scenario)
      return ctx.end()
    }
    case "error": {
      const codes: Record<number, string> = { 400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE" }
      const defaults: Record<number, string> = {
        429: "Resource has been exhausted (e.g. check quota).",
        500: "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
        503: "The model is overloaded. Please try again later."
      }
      if (typeof scenario.body === "string") return ctx.sendText(scenario.status, scenario.body, scenario.headers as Record<string, string>)
      return ctx.sendJson(
        scenario.status,
        scenario.body ?? { error: { code: scenario.status, message: scenario.message ?? defaults[scenario.status] ?? `Error ${scenario.status}.`, status: codes[scenario.status] ?? "UNKNOWN" } },
        scenario.headers as Record<string, string>
      )
    }
    case "hang":
      return ctx.untilGone()
    case "delay":
      await ctx.sleep(scenario.ms)
      return respond(ctx, scenario.then, target)
    case "stall_after":
    case "mid_stream_error": {
      const text = scenario.kind === "mid_stream_error" ? scenario.text ?? longText() : longText()
      const words = splitWords(text)
      const count = scenario.kind === "mid_stream_error" ? scenario.afterChunks ?? 2 : scenario.chunks
      ctx.startStream()
      const frames = words.slice(0, count).map((word) =>
        `data: ${JSON.stringify(envelope({ content: { role: "model", parts: [{ text: word }] } }, { promptTokenCount: 1 }, responseId, target.model))}\r\n\r\n`
      )
      if (scenario.kind === "mid_stream_error") {
        frames.push(`data: ${JSON.stringify({ error: { code: 503, message: scenario.message ?? "The model is overloaded. Please try again later.", status: scenario.errorType ?? "UNAVAILABLE" } })}\r\n\r\n`)
      }
      await writeFrames(ctx, frames, scenario)
      if (scenario.kind === "stall_after") return scenario.then === "destroy" ? ctx.destroy() : ctx.untilGone()
      return ctx.end()
    }
  }
}

export const startFakeGemini = async (options: FakeGeminiOptions): Promise<FakeGemini> => {
  const targets = new WeakMap<object, Target>()
  const fake = await startFake({ apiKey: options.apiKey ?? "" }, {
    basePath: "",
    commonHeaders: () => ({ "x-goog-fake": "1", server: "scaffolding on HTTPServer2" }),
    refuse: (req) => refuse(req, options, targets),
    defaultScenario: (body) => ({ kind: "text", text: `echo: ${lastUserText(body)}` }),
    respond: (ctx, scenario) => respond(ctx, scenario, targets.get(ctx.body)!)
  })
  return Object.assign(fake, { signature: SIGNATURE })
}

/**
 * Offline use of openai-node's Responses and embeddings clients: capture the exact request body
 * the SDK sends, and run the SDK's own SSE parser and `ResponseStream` accumulator over events
 * produced by the translators.
 */
import OpenAI from "openai"
import type { ResponseCreateParamsNonStreaming, ResponseCreateParamsStreaming } from "openai/resources/responses/responses"

type FetchInit = { readonly body?: unknown }

const jsonReply = (reply: unknown) =>
  new Response(JSON.stringify(reply), { status: 200, headers: { "content-type": "application/json" } })

/** A client whose every request is answered by `answer` (no network). */
export const offlineClient = (answer: (body: unknown) => Response, sink: Array<unknown> = []) =>
  new OpenAI({
    apiKey: "sk-test",
    baseURL: "http://gateway.test/v1",
    maxRetries: 0,
    fetch: async (_url: unknown, init?: FetchInit) => {
      const body: unknown = init?.body === undefined ? undefined : JSON.parse(String(init.body))
      sink.push(body)
      return answer(body)
    }
  })

const minimalResponse = {
  id: "resp_1",
  object: "response",
  created_at: 1,
  status: "completed",
  error: null,
  incomplete_details: null,
  instructions: null,
  metadata: {},
  model: "m",
  output: [],
  parallel_tool_calls: true,
  temperature: 1,
  tool_choice: "auto",
  tools: [],
  top_p: 1
}

/** The JSON body openai-node sends for `params`. */
export const responsesBody = async (params: ResponseCreateParamsNonStreaming): Promise<Record<string, unknown>> => {
  const sink: Array<unknown> = []
  await offlineClient(() => jsonReply(minimalResponse), sink).responses.create(params)
  return sink[0] as Record<string, unknown>
}

/** Server-sent events as OpenAI writes them: the event name, then the JSON. */
export const sseText = (events: ReadonlyArray<{ readonly type: string }>): string =>
  events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`).join("")

const sseReply = (events: ReadonlyArray<{ readonly type: string }>) =>
  new Response(sseText(events), { status: 200, headers: { "content-type": "text/event-stream; charset=utf-8" } })

/**
 * `client.responses.stream(...)` served `events` over SSE: the SDK's parser, its event checks and
 * its accumulator. Returns the final response and every event the SDK emitted.
 */
export const streamThroughSdk = async (
  events: ReadonlyArray<{ readonly type: string }>,
  params: Omit<ResponseCreateParamsStreaming, "stream"> = { model: "m", input: "hi" }
) => {
  const stream = offlineClient(() => sseReply(events)).responses.stream(params)
  const seen: Array<{ type: string; sequence_number: number }> = []
  stream.on("event", (event) => seen.push(event))
  const final = await stream.finalResponse()
  return { final, seen }
}

/** `client.responses.create({stream: true})` served `events`: the raw iterator (raises on `error`). */
export const iterateThroughSdk = async (events: ReadonlyArray<{ readonly type: string }>) => {
  const stream = await offlineClient(() => sseReply(events)).responses.create({ model: "m", input: "hi", stream: true })
  const seen: Array<{ type: string }> = []
  for await (const event of stream) seen.push(event)
  return seen
}

/** `client.embeddings.create(params)` answered with `reply` (as JSON), and the body it sent. */
export const embeddingsThroughSdk = async (params: OpenAI.EmbeddingCreateParams, reply: (body: unknown) => unknown) => {
  const sink: Array<unknown> = []
  const result = await offlineClient((body) => jsonReply(reply(body)), sink).embeddings.create(params)
  return { result, sent: sink[0] as Record<string, unknown> }
}

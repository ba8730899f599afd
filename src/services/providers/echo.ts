/**
 * The built-in `echo` provider: offline and deterministic. It answers with the last user
 * message, streams it word by word, honours `max_tokens` (as words) and `stop`, and reports
 * usage counted in words. It speaks Chat Completions, so every surface reaches it the same way
 * it reaches an OpenAI-compatible upstream.
 */
import { Effect, Result, Stream } from "effect"
import { ValidationFailed } from "../../domain/errors.ts"
import { echoEmbeddingsPieces, echoEmbeddingsResponse, type EmbeddingsRequest } from "../../wire/openai-embeddings.ts"
import type { ChatChunk, ChatResponse, ChatUsage } from "../../wire/openai-chat.ts"
import { newChatCompletionId } from "../../wire/ids.ts"
import type { ChatStreamItem, EmbeddingsRelay, OpenAIClient } from "./clients.ts"

/** Vectors computed between two turns of the event loop while an echo embeddings answer streams. */
const PIECES_PER_TURN = 16

/** One turn of the event loop (a macrotask), so sockets are served between batches of vectors. */
const nextTurn = Effect.promise(() => new Promise<void>((resolve) => setImmediate(resolve)))

type Message = { role?: unknown; content?: unknown }

const textOf = (content: unknown): string => {
  if (typeof content === "string") return content
  if (Array.isArray(content)) {
    return content
      .map((part) => (typeof part === "object" && part !== null && (part as { type?: unknown }).type === "text" ? String((part as { text?: unknown }).text ?? "") : ""))
      .filter((t) => t !== "")
      .join(" ")
  }
  return ""
}

const countWords = (text: string) => (text.trim() === "" ? 0 : text.trim().split(/\s+/).length)

interface EchoAnswer {
  readonly words: ReadonlyArray<string>
  readonly finish: "stop" | "length"
  readonly usage: ChatUsage
}

export const echoAnswer = (body: Record<string, unknown>): EchoAnswer => {
  const messages = (Array.isArray(body.messages) ? body.messages : []) as Array<Message>
  const lastUser = [...messages].reverse().find((m) => m.role === "user" || m.role === "tool")
  let reply = lastUser === undefined ? "" : textOf(lastUser.content)
  const stops = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? (body.stop as Array<string>) : []
  for (const stop of stops) {
    const at = stop === "" ? -1 : reply.indexOf(stop)
    if (at !== -1) reply = reply.slice(0, at)
  }
  let words = reply.split(/(?<=\s)/).filter((w) => w !== "")
  const limit = typeof body.max_completion_tokens === "number" ? body.max_completion_tokens : typeof body.max_tokens === "number" ? body.max_tokens : undefined
  let finish: "stop" | "length" = "stop"
  if (limit !== undefined && words.length > limit) {
    words = words.slice(0, limit)
    finish = "length"
  }
  const prompt = messages.reduce((sum, m) => sum + countWords(textOf(m.content)), 0)
  const completion = Math.max(words.length, 1)
  return { words, finish, usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion } }
}

export const makeEchoClient = (name: string): OpenAIClient => ({
  kind: "openai",
  name,
  // Speaks Chat Completions only: Responses clients reach it through translation.
  responses: undefined,
  // Deterministic unit vectors, so the embedded default serves /v1/embeddings offline.
  embeddings: (body) =>
    Effect.suspend(() => {
      const answer = echoEmbeddingsResponse(body as unknown as EmbeddingsRequest, String(body.model))
      return Result.isSuccess(answer)
        ? Effect.succeed(answer.success)
        : Effect.fail(new ValidationFailed({ message: answer.failure.message, details: { field: answer.failure.path } }))
    }),
  // The same vectors, computed as the answer streams, a few per turn of the event loop (issue
  // 22, finding 4): a 2,048-input request neither holds the loop nor its whole answer in memory.
  relayEmbeddings: (body) =>
    Effect.suspend(() => {
      const answer = echoEmbeddingsPieces(body as unknown as EmbeddingsRequest, String(body.model))
      if (Result.isFailure(answer)) {
        return Effect.fail(new ValidationFailed({ message: answer.failure.message, details: { field: answer.failure.path } }))
      }
      const encoder = new TextEncoder()
      // A pull takes PIECES_PER_TURN pieces from the lazy iterable (computing their vectors),
      // which leave as one write; then the loop gets a turn.
      const bytes = Stream.fromIterable(answer.success.pieces, { chunkSize: PIECES_PER_TURN }).pipe(
        Stream.mapArray((pieces) => [encoder.encode(pieces.join(""))] as const),
        Stream.mapEffect((encoded) => Effect.as(nextTurn, encoded))
      )
      return Effect.succeed<EmbeddingsRelay>({ bytes, promptTokens: () => answer.success.promptTokens })
    }),
  complete: (body) =>
    Effect.sync((): ChatResponse => {
      const answer = echoAnswer(body)
      return {
        id: newChatCompletionId(),
        object: "chat.completion",
        created: Math.floor(Date.now() / 1000),
        model: String(body.model),
        choices: [{ index: 0, message: { role: "assistant", content: answer.words.join("") }, logprobs: null, finish_reason: answer.finish }],
        usage: answer.usage
      } as ChatResponse
    }),
  stream: (body) =>
    Effect.sync(() => {
      const answer = echoAnswer(body)
      const base = { id: newChatCompletionId(), object: "chat.completion.chunk" as const, created: Math.floor(Date.now() / 1000), model: String(body.model) }
      const includeUsage = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true
      const chunks: Array<ChatChunk> = [
        { ...base, choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }], ...(includeUsage ? { usage: null } : {}) } as ChatChunk,
        ...answer.words.map((word) =>
          ({ ...base, choices: [{ index: 0, delta: { content: word }, logprobs: null, finish_reason: null }], ...(includeUsage ? { usage: null } : {}) }) as ChatChunk
        ),
        { ...base, choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: answer.finish }], ...(includeUsage ? { usage: null } : {}) } as ChatChunk
      ]
      if (includeUsage) chunks.push({ ...base, choices: [], usage: answer.usage } as ChatChunk)
      return Stream.fromIterable(chunks.map((chunk): ChatStreamItem => ({ chunk, raw: JSON.stringify(chunk) })))
    })
})

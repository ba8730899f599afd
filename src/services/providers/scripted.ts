/**
 * A `Providers` layer that answers from a script instead of the network, for tests of what the
 * gateway does around a provider call (refunds, slot release, mid-stream failures, audit
 * contents) without an HTTP fake. Each call's body is recorded; the script decides, per call,
 * an answer, a failure before the answer, or a stream of events with failures and delays in it.
 * The HTTP fakes under test/support remain the contract tests of the real provider clients.
 */
import { Duration, Effect, Layer, Stream } from "effect"
import type { AnthropicResponse, AnthropicStreamEvent } from "../../wire/anthropic-messages.ts"
import type { ConverseResponse, ConverseStreamEvent } from "../../wire/bedrock-converse.ts"
import type { ChatChunk, ChatResponse } from "../../wire/openai-chat.ts"
import type { EmbeddingsResponse } from "../../wire/openai-embeddings.ts"
import type { AnthropicClient, BedrockClient, ChatStreamItem, OpenAIClient, ProviderClient } from "./clients.ts"
import { Providers } from "./Providers.ts"
import type { UpstreamFailure } from "./upstream-http.ts"

export interface ScriptedCall {
  readonly provider: string
  readonly kind: ProviderClient["kind"]
  readonly stream: boolean
  readonly body: Record<string, unknown>
}

/** One item of a scripted stream: an event in the provider's format, a pause, or a failure that ends the stream. */
export type ScriptedStreamItem<Event> =
  | { readonly event: Event }
  | { readonly delay: Duration.Input }
  | { readonly fail: UpstreamFailure }

export type ScriptedAnswer<Response, Event> =
  | { readonly respond: Response; readonly delay?: Duration.Input }
  | { readonly fail: UpstreamFailure; readonly delay?: Duration.Input }
  | { readonly events: ReadonlyArray<ScriptedStreamItem<Event>> }

export type Script = {
  readonly openai?: (call: ScriptedCall) => ScriptedAnswer<ChatResponse, ChatChunk>
  readonly anthropic?: (call: ScriptedCall) => ScriptedAnswer<AnthropicResponse, AnthropicStreamEvent>
  /** Bedrock-kind Converse calls (the model id is the call body's `modelId`). */
  readonly bedrock?: (call: ScriptedCall) => ScriptedAnswer<ConverseResponse, ConverseStreamEvent>
  /** OpenAI-kind `POST /embeddings` (relayed or read whole); absent: the call is a defect. */
  readonly openaiEmbeddings?: (call: ScriptedCall) => ScriptedAnswer<EmbeddingsResponse, never>
  /** Anthropic-kind `count_tokens`; absent: the call is a defect. */
  readonly anthropicCount?: (call: ScriptedCall) => ScriptedAnswer<{ readonly input_tokens: number }, never>
}

/**
 * Interruptible like the real clients' waits (upstream-http.ts): the HTTP server runs handlers
 * uninterruptibly, and a client leaving or a drain cutting the request must end the wait.
 */
const pause = (delay: Duration.Input | undefined) => (delay === undefined ? Effect.void : Effect.interruptible(Effect.sleep(delay)))

const answerOf = <Response, Event>(answer: ScriptedAnswer<Response, Event>, call: ScriptedCall) =>
  Effect.andThen(pause("delay" in answer ? answer.delay : undefined), () => {
    if ("fail" in answer) return Effect.fail(answer.fail)
    if ("respond" in answer) return Effect.succeed(answer.respond)
    return Effect.die(new Error(`the script answered a ${call.stream ? "stream" : "complete"} call of ${call.provider} with stream events`))
  })

const streamOf = <Response, Event>(answer: ScriptedAnswer<Response, Event>, call: ScriptedCall) => {
  if ("fail" in answer) return Effect.andThen(pause(answer.delay), Effect.fail(answer.fail))
  if (!("events" in answer)) {
    return Effect.die(new Error(`the script answered a stream call of ${call.provider} with a whole response`))
  }
  return Effect.succeed(
    Stream.fromIterable(answer.events).pipe(
      Stream.mapEffect((item): Effect.Effect<ReadonlyArray<Event>, UpstreamFailure> =>
        "event" in item ? Effect.succeed([item.event]) : "delay" in item ? Effect.as(Effect.sleep(item.delay), []) : Effect.fail(item.fail)
      ),
      Stream.flattenIterable
    )
  )
}

/**
 * The layer, and the calls it received (in order). Providers named in `providers` answer with
 * their kind's script; a call to a kind the script does not cover is a defect (a test bug).
 */
export const scriptedProviders = (
  providers: ReadonlyArray<{ readonly name: string; readonly kind: ProviderClient["kind"] }>,
  script: Script
) => {
  const calls: Array<ScriptedCall> = []
  const scriptFor = <K extends keyof Script>(kind: K, call: ScriptedCall) => {
    calls.push(call)
    const answer = script[kind]
    if (answer === undefined) throw new Error(`no script for ${kind} calls`)
    return answer(call) as ReturnType<NonNullable<Script[K]>>
  }
  const openai = (name: string): OpenAIClient => ({
    kind: "openai",
    name,
    responses: undefined,
    embeddings: (body) =>
      Effect.suspend(() => {
        const call = { provider: name, kind: "openai" as const, stream: false, body }
        return answerOf(scriptFor("openaiEmbeddings", call), call)
      }),
    relayEmbeddings: (body) =>
      Effect.suspend(() => {
        const call = { provider: name, kind: "openai" as const, stream: false, body }
        return Effect.map(answerOf(scriptFor("openaiEmbeddings", call), call), (answer) => ({
          bytes: Stream.make(new TextEncoder().encode(JSON.stringify(answer))),
          promptTokens: () => answer.usage?.prompt_tokens
        }))
      }),
    complete: (body) =>
      Effect.suspend(() => {
        const call = { provider: name, kind: "openai" as const, stream: false, body }
        return answerOf(scriptFor("openai", call), call)
      }),
    stream: (body) =>
      Effect.suspend(() => {
        const call = { provider: name, kind: "openai" as const, stream: true, body }
        return Effect.map(
          streamOf(scriptFor("openai", call), call),
          (events) => Stream.map(events, (chunk): ChatStreamItem => ({ chunk, raw: JSON.stringify(chunk) }))
        )
      })
  })
  const anthropic = (name: string): AnthropicClient => ({
    kind: "anthropic",
    name,
    complete: (body) =>
      Effect.suspend(() => {
        const call = { provider: name, kind: "anthropic" as const, stream: false, body }
        return answerOf(scriptFor("anthropic", call), call)
      }),
    stream: (body) =>
      Effect.suspend(() => {
        const call = { provider: name, kind: "anthropic" as const, stream: true, body }
        return streamOf(scriptFor("anthropic", call), call)
      }),
    countTokens: (body) =>
      Effect.suspend(() => {
        const call = { provider: name, kind: "anthropic" as const, stream: false, body }
        return answerOf(scriptFor("anthropicCount", call), call)
      })
  })
  const bedrock = (name: string): BedrockClient => {
    const converseCall = (modelId: string, body: object, stream: boolean) => ({
      provider: name,
      kind: "bedrock" as const,
      stream,
      body: { ...body, modelId } as Record<string, unknown>
    })
    return {
      kind: "bedrock",
      name,
      converse: (modelId, body) =>
        Effect.suspend(() => {
          const call = converseCall(modelId, body, false)
          return answerOf(scriptFor("bedrock", call), call)
        }),
      converseStream: (modelId, body) =>
        Effect.suspend(() => {
          const call = converseCall(modelId, body, true)
          return streamOf(scriptFor("bedrock", call), call)
        }),
      countTokens: () => Effect.die(new Error(`the scripted provider ${name} counts no tokens`)),
      invokeModel: () => Effect.die(new Error(`the scripted provider ${name} invokes no models`))
    }
  }
  const clientOf = (p: (typeof providers)[number]): ProviderClient =>
    p.kind === "openai" ? openai(p.name) : p.kind === "bedrock" ? bedrock(p.name) : anthropic(p.name)
  const clients = new Map(providers.map((p) => [p.name, clientOf(p)] as const))
  const layer = Layer.succeed(
    Providers,
    Providers.of({
      client: (name) => {
        const client = clients.get(name)
        if (client === undefined) throw new Error(`no scripted provider named ${name}`)
        return client
      }
    })
  )
  return { layer, calls }
}

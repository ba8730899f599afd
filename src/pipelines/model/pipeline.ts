/**
 * The one model pipeline: authenticate -> admit (validate, model, scope, stream slot, budget,
 * credits) -> the adapter for (client format, provider kind) -> the client format's responder.
 * See adapter.ts for how formats and provider kinds plug in.
 */
import { Effect, Stream } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { Providers } from "../../services/providers/Providers.ts"
import { admitModelRequest } from "../admission.ts"
import { authenticated } from "../authenticate.ts"
import { CurrentRequest } from "../request.ts"
import { eventStreamResponse, json } from "../respond.ts"
import type { ApiError } from "../../domain/errors.ts"
import type { ProviderClient } from "../../services/providers/clients.ts"
import type { Adapter, AdapterContext, ClientEvent, ClientFormat } from "./adapter.ts"

/**
 * What a format with state around its answers (Responses: stored conversations) puts between
 * admission and the adapter: the context the adapter gets, and the answer or events as the
 * client gets them.
 */
export interface AnswerSession {
  readonly context: AdapterContext
  readonly complete: (body: unknown) => Effect.Effect<unknown>
  readonly stream: <E>(events: Stream.Stream<ClientEvent, E>) => Stream.Stream<ClientEvent, E>
}

export const modelPipeline = <Request extends { readonly model: string; readonly stream?: boolean | null | undefined }, R = never>(
  format: ClientFormat<Request>,
  session?: (context: AdapterContext, client: ProviderClient) => Effect.Effect<AnswerSession, ApiError, R>
) =>
  authenticated(Effect.gen(function*() {
    const state = yield* CurrentRequest
    const { raw, request, resolved } = yield* admitModelRequest(format.decode)
    const client = (yield* Providers).client(resolved.provider.name)
    // The table is keyed by the client's own kind, so the pair always matches.
    const adapter = format.adapters[client.kind] as Adapter<Request, typeof client>
    const admitted: AdapterContext = { state, resolved, raw, headers: (yield* HttpServerRequest).headers }
    const around = session === undefined ? undefined : yield* session(admitted, client)
    const context = around?.context ?? admitted
    if (request.stream !== true) {
      const body = yield* adapter.complete(client, request, context)
      return json(around === undefined ? body : yield* around.complete(body))
    }
    const answered = yield* adapter.stream(client, request, context)
    const events = around === undefined ? answered : around.stream(answered)
    const framer = format.framer(state, request)
    const frames = events.pipe(
      Stream.map(framer.frame),
      Stream.concat(Stream.suspend(() => Stream.make(framer.end()))),
      Stream.filter((frame) => frame !== "")
    )
    return yield* eventStreamResponse(frames, framer.failure)
  }))

/**
 * The one model pipeline: authenticate -> admit (validate, model, scope, stream slot, budget,
 * credits) -> the adapter for (client format, provider kind) -> the client format's responder.
 * See adapter.ts for how formats and provider kinds plug in.
 */
import { Effect, Stream } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { Providers } from "../../services/providers/Providers.ts"
import { TokenEstimator } from "../../services/tokens/TokenEstimator.ts"
import { admitModelRequest } from "../admission.ts"
import { authenticated } from "../authenticate.ts"
import { CurrentRequest } from "../request.ts"
import { eventStreamResponse, json } from "../respond.ts"
import type { Adapter, AdapterContext, ClientFormat } from "./adapter.ts"

export const modelPipeline = <Request extends { readonly model: string; readonly stream?: boolean | null | undefined }>(
  format: ClientFormat<Request>
) =>
  authenticated(Effect.gen(function*() {
    const state = yield* CurrentRequest
    const { raw, request, resolved } = yield* admitModelRequest(format.decode)
    const client = (yield* Providers).client(resolved.provider.name)
    // The table is keyed by the client's own kind, so the pair always matches.
    const adapter = format.adapters[client.kind] as Adapter<Request, typeof client>
    const context: AdapterContext = { state, resolved, raw, headers: (yield* HttpServerRequest).headers, tokens: yield* TokenEstimator }
    if (request.stream !== true) return json(yield* adapter.complete(client, request, context))
    const events = yield* adapter.stream(client, request, context)
    const framer = format.framer(state, request)
    const frames = events.pipe(
      Stream.map(framer.frame),
      Stream.concat(Stream.suspend(() => Stream.make(framer.end()))),
      Stream.filter((frame) => frame !== "")
    )
    return yield* eventStreamResponse(frames, framer.failure)
  }))

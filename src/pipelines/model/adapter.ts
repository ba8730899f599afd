/**
 * The model path's extension point: `adapters[clientFormat][providerKind]`.
 *
 * One pipeline (pipeline.ts) admits every model request the same way, then hands it to the
 * adapter for the pair (the client's wire format, the provider's kind); the client format's
 * responder (format.ts) turns what the adapter returns into JSON or framed SSE. An adapter owns
 * everything specific to its pair: the request it sends upstream, the upstream call, and turning
 * the answer and the stream back into the client's format.
 *
 * Translation is pairwise, not through one internal canonical form. Where the client format is
 * the provider's, the adapter is a passthrough that forwards the client's own body (a canonical
 * form would have to model every field of every vendor, betas included, to forward them intact);
 * where they differ, the adapter calls the wire package's translators for that pair. A client
 * format with no direct translator toward a provider kind composes through Chat Completions, the
 * format every provider kind has a translator for (for example a Responses client reaching an
 * Anthropic-kind provider: Responses -> Chat -> Messages, and back). So a new client format adds
 * one format descriptor and one adapter per provider kind; a new provider kind adds one adapter
 * per client format; nothing else changes.
 */
import type { Effect, Stream } from "effect"
import type { Headers } from "effect/http/Headers"
import type { ApiError } from "../../domain/errors.ts"
import type { ResolvedModel } from "../../services/catalog/ModelCatalog.ts"
import type { ProviderClient } from "../../services/providers/clients.ts"
import type { TokenEstimator } from "../../services/tokens/TokenEstimator.ts"
import type { UpstreamFailure } from "../../services/providers/upstream-http.ts"
import type { DecodeResult } from "../../wire/decode.ts"
import type { RequestState } from "../request.ts"
import type { Deprecation } from "../../domain/deprecation.ts"

/** One server-sent event in the client's format: its JSON text, and its `event:` name where the format has one. */
export interface ClientEvent {
  readonly data: string
  readonly event?: string
  /** The event as an object, when the adapter has it (a framer that follows the stream's state reads it). */
  readonly value?: unknown
}

export interface AdapterContext {
  readonly state: RequestState
  readonly resolved: ResolvedModel
  /** The client's request headers (version and beta headers a passthrough forwards). */
  readonly headers: Headers
  /** The body as the client sent it, for a passthrough to forward fields the gateway does not model. */
  readonly raw: Record<string, unknown>
  /** The count_tokens estimator, for a translated stream that must announce input tokens before the upstream counts them. */
  readonly tokens: TokenEstimator["Service"]
}

export interface Adapter<Request, Client extends ProviderClient> {
  /** The whole answer, as the client format's JSON body. */
  readonly complete: (client: Client, request: Request, context: AdapterContext) => Effect.Effect<unknown, ApiError>
  /** Resolves once the upstream accepted the request; the events then follow in the client's format. */
  readonly stream: (
    client: Client,
    request: Request,
    context: AdapterContext
  ) => Effect.Effect<Stream.Stream<ClientEvent, UpstreamFailure>, ApiError>
}

export type AdapterTable<Request> = {
  readonly [Kind in ProviderClient["kind"]]: Adapter<Request, Extract<ProviderClient, { readonly kind: Kind }>>
}

/** Frames one streamed answer; made per stream, so a format whose events are numbered can follow them. */
export interface StreamFramer {
  /** One event as an SSE frame. */
  readonly frame: (event: ClientEvent) => string
  /** What closes a completed stream (`data: [DONE]` for Chat Completions, nothing for Messages). */
  readonly end: () => string
  /** After the 200, a failure becomes these frames; the stream then ends. */
  readonly failure: (error: ApiError) => string
}

/** A client wire format: how its requests are decoded, which adapters serve it, how its answers are framed. */
export interface ClientFormat<Request extends { readonly model: string; readonly stream?: boolean | null | undefined }> {
  /**
   * Admission's decoder: checks what the gateway relies on (model, stream, the shape of the
   * conversation). A translating adapter decodes `context.raw` strictly on top of this.
   */
  readonly decode: (body: unknown) => DecodeResult<Request>
  readonly adapters: AdapterTable<Request>
  readonly framer: (state: RequestState, request: Request) => StreamFramer
  /** How a cut stream of this format is continued on another deployment (issue 20); absent: it is not. */
  readonly continuation?: ContinuationSupport
  /** The output text of one streamed event, for the gateway's own count of a stream cut before its usage (issue 33). */
  readonly outputText?: (event: ClientEvent) => string
  /** The deprecated fields the body uses (issue 40): announced by headers on the answer. */
  readonly deprecatedFields?: (raw: Readonly<Record<string, unknown>>) => ReadonlyArray<Deprecation>
}

/**
 * Stream continuation (`routing.stream_continuation`): a follower watches the events the client
 * was sent; when the upstream fails mid-stream, it says what the assistant wrote so far, builds
 * the request that continues it, and rewrites the continuation's events so they extend the
 * stream the client already has (its opening dropped, ids and indices carried on).
 */
export interface ContinuationSupport {
  readonly follower: () => ContinuationFollower
}

export interface ContinuationFollower {
  readonly observe: (event: ClientEvent) => void
  /** The assistant's text so far; undefined when the stream cannot be continued (a tool call or thinking was streamed). */
  readonly partial: () => string | undefined
  /**
   * The client's body asking for the rest: the partial turn appended as the assistant's (a
   * prefill, for the kinds that continue one), and for the others an instruction to continue.
   */
  readonly continueBody: (raw: Record<string, unknown>, partial: string, kind: ProviderClient["kind"]) => Record<string, unknown>
  /** Rewrites one event of the continuation (none, one or more events for the client). */
  readonly splice: () => (event: ClientEvent) => ReadonlyArray<ClientEvent>
}

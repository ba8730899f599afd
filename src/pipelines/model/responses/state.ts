/**
 * Responses conversation state around the adapters (issue 24 item 1): before the adapter runs,
 * `previous_response_id` and `item_reference` items are resolved from the stored responses of
 * the request's owner; after it, the answer is stored (unless `store: false`) before the client
 * sees its end, so the next turn finds it on any replica.
 *
 * What reaches the adapter:
 * - Translated providers (Anthropic, Bedrock, Chat-only OpenAI-compatible): the whole
 *   conversation in `input` (the chain of stored responses, oldest first: each one's input items
 *   then its output items, then this request's input with references replaced by the items they
 *   name), and no `previous_response_id`.
 * - A provider that serves the Responses API itself (passthrough): when every reference names a
 *   response or item the gateway stored from that same provider, the body is forwarded unchanged
 *   (the vendor resolves its own ids, and its prompt cache keeps working); otherwise (the
 *   gateway's own ids, another provider's) it is expanded as above, with item ids left out and
 *   reasoning items without encrypted content dropped, as the vendor would not know them.
 *
 * Ids are kept apart: a passthrough response is stored under the vendor's id with its provider
 * named; the gateway's own responses carry ids it generated. Either is found only by its owner.
 *
 * The write is on the request's path, before the answer (or the stream's terminal event) goes
 * out, unlike the audit's batches: a client sends its next turn the moment it has the answer,
 * possibly to another replica, and that turn must find it.
 */
import { Effect, Stream } from "effect"
import { NotFound, ValidationFailed } from "../../../domain/errors.ts"
import { type ChainLink, type JsonItem, type SaveOutcome, StoredResponses } from "../../../services/responses/StoredResponses.ts"
import { newFunctionCallItemId, newOutputMessageId } from "../../../wire/ids.ts"
import { waiveCharge } from "../../admission.ts"
import { AuthenticatedKey } from "../../authenticate.ts"
import type { AdapterContext, ClientEvent } from "../adapter.ts"

export interface ResponsesSession {
  /** The context the adapter gets: `raw` is the body with references resolved. */
  readonly context: AdapterContext
  /** The whole answer as the client gets it: stored, `store` and `previous_response_id` set. */
  readonly complete: (response: unknown) => Effect.Effect<unknown>
  /** The events as the client gets them: stored before the terminal event goes out. */
  readonly stream: <E>(events: Stream.Stream<ClientEvent, E>) => Stream.Stream<ClientEvent, E>
}

const isObject = (value: unknown): value is JsonItem => typeof value === "object" && value !== null && !Array.isArray(value)

/** A bare `{id}` is an item reference, as the SDK types it. */
const isReference = (item: unknown): item is JsonItem & { readonly id: string } =>
  isObject(item) && (item["type"] === "item_reference" || ((item["type"] === undefined || item["type"] === null) && !("role" in item))) &&
  typeof item["id"] === "string"

const TURNED_OFF =
  "stored responses are turned off on this gateway (responses.store: false), so earlier responses and items cannot be referenced; send the whole conversation in input (with the AI SDK, set providerOptions.openai.store to false)"

/** An id for an input item that came without one, so `input_items` can list it and references find it. */
const withId = (item: JsonItem): JsonItem => {
  if (typeof item["id"] === "string" && item["id"] !== "") return item
  const type = item["type"] ?? ("role" in item ? "message" : undefined)
  const id = type === "message" ? newOutputMessageId() : type === "function_call" ? newFunctionCallItemId() : `item_${newOutputMessageId().slice(4)}`
  return { ...(type === undefined ? {} : { type }), ...item, id }
}

/** For a vendor that never saw them: its own validation would refuse unknown ids and foreign reasoning. */
const forVendor = (items: ReadonlyArray<JsonItem>): Array<JsonItem> =>
  items.flatMap((item) => {
    if (item["type"] === "reasoning" && typeof item["encrypted_content"] !== "string") return []
    const { id: _, ...rest } = item
    return [rest]
  })

const TERMINAL_STORED = new Set(["response.completed", "response.incomplete"])

/** Items looked at per turn of the event loop. */
const YIELD_EVERY = 1_000

/**
 * Resolves the request's references and returns what the pipeline needs to answer and store it.
 * `passthroughProvider`: the provider's name when the body will be forwarded to its own
 * Responses API; undefined when it will be translated.
 */
export const responsesSession = Effect.fnUntraced(function*(context: AdapterContext, passthroughProvider: string | undefined) {
  const stored = yield* StoredResponses
  const owner = (yield* AuthenticatedKey).id
  const raw = context.raw
  const previous = raw["previous_response_id"]
  if (previous !== undefined && previous !== null && typeof previous !== "string") {
    return yield* new ValidationFailed({ message: "expected a string", details: { field: "previous_response_id" } })
  }
  const previousId = typeof previous === "string" && previous !== "" ? previous : null
  const input = raw["input"]
  const items: ReadonlyArray<unknown> = typeof input === "string"
    ? [{ type: "message", role: "user", content: [{ type: "input_text", text: input }] }]
    : Array.isArray(input) ? input : []
  const references: Array<{ readonly index: number; readonly id: string }> = []
  for (let index = 0; index < items.length; index++) {
    // A 1 MiB body holds up to about 20,000 items: the event loop gets a turn every YIELD_EVERY (issue 32).
    if (index % YIELD_EVERY === YIELD_EVERY - 1) yield* Effect.yieldNow
    const item = items[index]
    if (isReference(item)) references.push({ index, id: item.id })
  }

  // Read once: a config reload meanwhile does not change what this request does.
  const enabled = stored.enabled
  if (!enabled && (previousId !== null || references.length > 0)) {
    const field = previousId !== null ? "previous_response_id" : `input.${references[0]!.index}`
    return yield* new ValidationFailed({ message: TURNED_OFF, details: { field } })
  }

  // Every reference resolved up front: an unknown one is named. It is not charged (issue 35
  // item 2): it may be the gateway's own doing, a response it could not store (that answer said
  // `store: false`, but a client continuing the conversation may not look), and no provider
  // was asked yet.
  const notStored = (error: NotFound) =>
    Effect.andThen(Effect.sync(() => waiveCharge(context.state.scope, `not charged: ${error.message}`)), Effect.fail(error))
  const found = yield* stored.items(owner, references.map((reference) => reference.id))
  for (const reference of references) {
    if (!found.has(reference.id)) {
      return yield* notStored(new NotFound({
        message: `no stored item with id "${reference.id}" (stored responses are kept for responses.retention_days, and only for the key that made them)`,
        details: { field: `input.${reference.index}.id`, item_id: reference.id }
      }))
    }
  }
  // One budget for the stored text a request brings in (issue 32 item 1): each reference
  // counts every time it appears (a thousand references to one 900 KB item would be 900 MB of
  // conversation), and the chain of previous_response_id gets what the references left.
  const budget = stored.maxConversationBytes
  let referenced = 0
  for (const reference of references) {
    referenced += found.get(reference.id)!.item.length
    if (referenced > budget) {
      return yield* new ValidationFailed({
        message: `the items referenced in input hold more than ${budget} bytes of stored text (responses.max_conversation_bytes, each reference counted every time it appears); reference fewer or smaller items`,
        details: { field: `input.${reference.index}`, max_bytes: budget }
      })
    }
  }
  // Each item parsed once however often it is referenced; the event loop gets a turn between items.
  const parsed = new Map<string, JsonItem>()
  const ownInput: Array<JsonItem> = []
  for (let index = 0; index < items.length; index++) {
    if (index % YIELD_EVERY === YIELD_EVERY - 1) yield* Effect.yieldNow
    const item = items[index]
    if (!isReference(item)) {
      ownInput.push(withId(isObject(item) ? item : { value: item }))
      continue
    }
    let value = parsed.get(item.id)
    if (value === undefined) {
      yield* Effect.yieldNow
      value = JSON.parse(found.get(item.id)!.item) as JsonItem
      parsed.set(item.id, value)
    }
    ownInput.push(value)
  }

  let links: ReadonlyArray<ChainLink> = []
  let previousProvider: string | null = null
  if (previousId !== null) {
    const chain = yield* stored.chain(previousId, owner, budget - referenced)
    if ("tooLarge" in chain) {
      return yield* new ValidationFailed({
        message: `the conversation ending with "${previousId}" and the items referenced in input hold more than ${budget} bytes of stored text (responses.max_conversation_bytes); send a shorter conversation in input`,
        details: { field: "previous_response_id", response_id: previousId, max_bytes: budget }
      })
    }
    if ("missing" in chain) {
      return yield* notStored(new NotFound({
        message: chain.missing === previousId
          ? `no stored response with id "${previousId}"`
          : `response "${chain.missing}", an earlier turn of this conversation, is no longer stored; send the whole conversation in input`,
        details: { field: "previous_response_id", response_id: chain.missing }
      }))
    }
    links = chain.links
    previousProvider = chain.links[chain.links.length - 1]?.provider ?? null
  }

  // The vendor holds everything referenced: forward as sent.
  const unchanged = passthroughProvider !== undefined &&
    (previousId === null || previousProvider === passthroughProvider) &&
    references.every((reference) => found.get(reference.id)!.provider === passthroughProvider)
  let adapterRaw: Record<string, unknown> = raw
  if (!unchanged && (previousId !== null || references.length > 0)) {
    const { previous_response_id: _, ...rest } = raw
    // The stored items are parsed only here, where the conversation is sent whole.
    const conversation = [...links.flatMap((link) => link.items()), ...ownInput]
    adapterRaw = { ...rest, input: passthroughProvider === undefined ? conversation : forVendor(conversation) }
  }

  const store = raw["store"] !== false && enabled
  const provider = passthroughProvider
  // Chained, not a generator made per request (README, Generators made per request).
  const finish = (response: JsonItem): Effect.Effect<JsonItem> => {
    if (!store) return Effect.succeed(response)
    const answered: JsonItem = { ...response, store: true, previous_response_id: previousId }
    return Effect.map(stored.save({ owner, provider, previousResponseId: previousId, response: answered, inputItems: ownInput }), (outcome: SaveOutcome) => {
      if (outcome === "stored") return answered
      // Not kept: the answer says so, and the audit record says why.
      context.state.audit.details = { ...context.state.audit.details, response_not_stored: outcome }
      return { ...answered, store: false }
    })
  }
  /** Lifecycle events before the end: they say what the end will. */
  const echo = (response: JsonItem): JsonItem =>
    store ? { ...response, store: true, previous_response_id: previousId } : response

  const session: ResponsesSession = {
    context: adapterRaw === raw ? context : { ...context, raw: adapterRaw },
    complete: (response) => isObject(response) ? finish(response) : Effect.succeed(response),
    // Nothing to store and nothing to echo: the events are already what the client gets.
    stream: (events) => !store && previousId === null ? events : Stream.mapEffect(events, (event) => {
        const value = event.value
        if (!isObject(value) || !isObject(value["response"])) return Effect.succeed(event)
        const type = value["type"]
        const response = value["response"] as JsonItem
        const patched = typeof type === "string" && TERMINAL_STORED.has(type)
          ? finish(response)
          : Effect.succeed(type === "response.failed" ? response : echo(response))
        return Effect.map(patched, (next): ClientEvent => {
          if (next === response) return event
          const updated = { ...value, response: next }
          return { ...event, data: JSON.stringify(updated), value: updated }
        })
      })
  }
  return session
})

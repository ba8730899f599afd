/**
 * Stored Responses (decisions section 14, issue 24): what `POST /v1/responses` answered, kept in
 * the store (so every replica sees it) for `responses.retention_days`, owned by the key or
 * identity subject that made it. Reads match the owner, so another owner's id is answered like an
 * unknown one. `responses.store: false` turns it off: nothing is written and references are
 * refused by the pipeline.
 *
 * What is kept is conversation text (the request's input items, the answer's output items), the
 * model and usage: the README says so for operators who must not keep it.
 *
 * The `responses` settings are read from AppConfig at each use, so a config reload applies to
 * the next request (issue 26): `enabled` is what a request decides from, once, at its start; a
 * response is kept for the `retention_days` in force when it is saved; the sweep of expired rows
 * runs once storing has been on at all in this process.
 */
import { Context, Duration, Effect, Layer, Schedule } from "effect"
import { type DependencyUnavailable, NotFound } from "../../domain/errors.ts"
import { AppConfig } from "../config/AppConfig.ts"
import { storeUnavailable } from "../credits/Credits.ts"
import { type FoundItemRecord, type NewStoredResponse, ResponsesRepo, type StoredItemRecord, type StoredResponseRecord } from "../store/ResponsesRepo.ts"

export type JsonItem = Record<string, unknown>

export interface SaveRequest {
  readonly owner: string
  /** The upstream provider whose id `response.id` is, on a passthrough; undefined for the gateway's own. */
  readonly provider: string | undefined
  readonly previousResponseId: string | null
  /** The response object as it is answered. */
  readonly response: JsonItem
  /** The request's own input items, references resolved, each with an `id`. */
  readonly inputItems: ReadonlyArray<JsonItem>
}

/** `stored`, or why not: larger than `responses.max_stored_bytes`, or the store failed. */
export type SaveOutcome = "stored" | "too_large" | "failed"

/**
 * One response of a conversation. Its items are parsed when asked for: a passthrough continuing
 * a conversation of its own provider forwards the id alone and never needs them (issue 38).
 */
export interface ChainLink {
  readonly id: string
  readonly provider: string | null
  /** Its input items, then its output items. */
  readonly items: () => ReadonlyArray<JsonItem>
}

/** Conversations longer than this many stored responses are refused rather than walked further. */
export const MAX_CHAIN = 1000

const DAY_MS = 24 * 60 * 60 * 1000

const outputOf = (response: string): ReadonlyArray<JsonItem> => {
  const parsed = JSON.parse(response) as { output?: unknown }
  return Array.isArray(parsed.output) ? (parsed.output as ReadonlyArray<JsonItem>) : []
}

const idOf = (item: JsonItem): string | undefined => (typeof item["id"] === "string" && item["id"] !== "" ? item["id"] : undefined)

export class StoredResponses extends Context.Service<StoredResponses, {
  /** False when the operator turned storing off (`responses.store: false`); read once per request. */
  readonly enabled: boolean
  /** The stored text one request may bring in, chain and references together (`responses.max_conversation_bytes`). */
  readonly maxConversationBytes: number
  readonly save: (request: SaveRequest) => Effect.Effect<SaveOutcome>
  /** This owner's stored response, or 404 not_found. */
  readonly get: (id: string, owner: string) => Effect.Effect<StoredResponseRecord, NotFound | DependencyUnavailable>
  readonly remove: (id: string, owner: string) => Effect.Effect<void, NotFound | DependencyUnavailable>
  /** This owner's items by id (the newest where an id repeats); absent ids are absent from the map. */
  readonly items: (owner: string, ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyMap<string, FoundItemRecord>, DependencyUnavailable>
  /**
   * The conversation ending with response `id`, oldest first; `missing` names the first response
   * of it that is not (or no longer) stored for this owner.
   */
  readonly chain: (
    id: string,
    owner: string,
    /** Stored text this read may load; `responses.max_conversation_bytes` when not given. */
    maxBytes?: number
  ) => Effect.Effect<
    { readonly links: ReadonlyArray<ChainLink> } | { readonly missing: string } | { readonly tooLarge: number },
    DependencyUnavailable
  >
}>()("modelgate/StoredResponses") {
  static readonly layer = Layer.effect(
    StoredResponses,
    Effect.gen(function*() {
      const repo = yield* ResponsesRepo
      const config = yield* AppConfig
      // Expired rows are already invisible to every read; the sweep only gives the space back.
      // It runs once storing is (or has been) on: a reload may turn it on, or off with rows left.
      let stored = config.responses.store
      const sweep = Effect.suspend(() => {
        stored ||= config.responses.store
        return stored ? repo.deleteExpired : Effect.void
      }).pipe(Effect.catch((error) => Effect.logWarning("could not delete expired stored responses", error)))
      yield* Effect.forkScoped(Effect.repeat(sweep, Schedule.spaced(Duration.minutes(10))))
      const notFound = (id: string) =>
        new NotFound({ message: `no stored response with id "${id}"`, details: { response_id: id } })
      const find = (id: string, owner: string) => repo.find(id, owner).pipe(Effect.mapError(storeUnavailable))
      return StoredResponses.of({
        get maxConversationBytes() {
          return config.responses.max_conversation_bytes
        },
        get enabled() {
          return config.responses.store
        },
        // Called when the request decided to store (from `enabled` at its start): a reload that
        // turned storing off meanwhile does not undo what its answer says.
        save: Effect.fnUntraced(function*(request) {
          const settings = config.responses
          const retentionMs = settings.retention_days * DAY_MS
          const id = request.response["id"]
          if (typeof id !== "string") return "failed" as const
          const response = JSON.stringify(request.response)
          const input = JSON.stringify(request.inputItems)
          const bytes = Buffer.byteLength(response) + Buffer.byteLength(input)
          if (bytes > settings.max_stored_bytes) return "too_large" as const
          // Its times are the store's (ResponsesRepo): every replica judges expiry by that one clock.
          const record: NewStoredResponse = {
            id,
            owner: request.owner,
            provider: request.provider ?? null,
            model: typeof request.response["model"] === "string" ? request.response["model"] : "",
            previous_response_id: request.previousResponseId,
            response,
            input_items: input,
            bytes
          }
          const output = Array.isArray(request.response["output"]) ? (request.response["output"] as ReadonlyArray<JsonItem>) : []
          const seen = new Set<string>()
          const items: Array<StoredItemRecord> = []
          const all = [...request.inputItems, ...output]
          for (let index = 0; index < all.length; index++) {
            // Up to about 20,000 items from a 1 MiB body: the event loop gets a turn between slices (issue 32).
            if (index % 1_000 === 999) yield* Effect.yieldNow
            const item = all[index]!
            const itemId = idOf(item)
            if (itemId === undefined || seen.has(itemId)) continue
            seen.add(itemId)
            items.push({ item_id: itemId, response_id: id, item: JSON.stringify(item) })
          }
          return yield* repo.insert(record, items, retentionMs).pipe(
            Effect.as("stored" as const),
            Effect.catch((error) => Effect.as(Effect.logWarning("could not store a response", error), "failed" as const))
          )
        }),
        get: (id, owner) => Effect.flatMap(find(id, owner), (row) => row === undefined ? Effect.fail(notFound(id)) : Effect.succeed(row)),
        remove: (id, owner) =>
          Effect.flatMap(repo.remove(id, owner).pipe(Effect.mapError(storeUnavailable)), (gone) => gone ? Effect.void : Effect.fail(notFound(id))),
        items: Effect.fnUntraced(function*(owner, ids) {
          const rows = yield* repo.findItems(owner, [...new Set(ids)]).pipe(Effect.mapError(storeUnavailable))
          const found = new Map<string, FoundItemRecord>()
          // Newest first: the first row of an id wins.
          for (const row of rows) if (!found.has(row.item_id)) found.set(row.item_id, row)
          return found
        }),
        chain: Effect.fnUntraced(function*(id, owner, budget) {
          const maxBytes = budget ?? config.responses.max_conversation_bytes
          const links: Array<ChainLink> = []
          const visited = new Set<string>()
          let bytes = 0
          let next: string | null = id
          while (next !== null) {
            // A cycle cannot be built through the API (a response names an older one); a
            // corrupt row must still not loop forever.
            if (visited.has(next) || links.length >= MAX_CHAIN) return { missing: next }
            visited.add(next)
            const row: StoredResponseRecord | undefined = yield* find(next, owner)
            if (row === undefined) return { missing: next }
            // Nor loaded beyond `responses.max_conversation_bytes`: each response may hold up to
            // `max_stored_bytes`, and a thousand of them read into one request would be gigabytes.
            bytes += row.response.length + row.input_items.length
            if (bytes > maxBytes) return { tooLarge: maxBytes }
            const { input_items, response } = row
            links.push({
              id: row.id,
              provider: row.provider,
              items: () => [...JSON.parse(input_items) as ReadonlyArray<JsonItem>, ...outputOf(response)]
            })
            next = row.previous_response_id
          }
          return { links: links.reverse() }
        })
      })
    })
  )
}

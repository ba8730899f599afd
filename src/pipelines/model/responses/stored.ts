/**
 * `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and `GET /v1/responses/{id}/input_items`
 * (issue 24 item 1), answered from the gateway's stored responses in the shapes of OpenAI's API
 * (the `openai` SDK's `Response`, `ResponseDeleted`-style body, `ResponseItemList`). A response
 * of another key or subject, an expired or deleted one, and an unknown id are all 404 not_found.
 * These are free: they reach no provider.
 */
import { Effect, Schema } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { ValidationFailed } from "../../../domain/errors.ts"
import { decodeStrict } from "../../../domain/validation.ts"
import { type JsonItem, StoredResponses } from "../../../services/responses/StoredResponses.ts"
import { authenticated, AuthenticatedKey } from "../../authenticate.ts"
import { CurrentRequest } from "../../request.ts"
import { json } from "../../respond.ts"

const responseId = Effect.map(CurrentRequest, (state) => state.params.id ?? "")

/** `include` (ignored: the stored answer is what it was) and `stream` (only false: no replays). */
const RetrieveQuery = Schema.Struct({
  include: Schema.optional(Schema.String),
  "include[]": Schema.optional(Schema.String),
  stream: Schema.optional(Schema.Literals(["false"])),
  include_obfuscation: Schema.optional(Schema.String)
})

const LimitFromString = Schema.FiniteFromString.check(
  Schema.makeFilter((n: number) => Number.isInteger(n) && n >= 1 && n <= 100, { expected: "an integer between 1 and 100" })
)

const ItemsQuery = Schema.Struct({
  limit: Schema.optional(LimitFromString),
  order: Schema.optional(Schema.Literals(["asc", "desc"])),
  after: Schema.optional(Schema.String),
  include: Schema.optional(Schema.String),
  "include[]": Schema.optional(Schema.String)
})

const queryOf = Effect.map(HttpServerRequest, (request) => Object.fromEntries(new URL(request.url, "http://local").searchParams))

const audited = (id: string) =>
  Effect.map(CurrentRequest, (state) => {
    state.audit.details = { ...state.audit.details, response_id: id }
  })

export const retrieveStoredResponse = authenticated(Effect.gen(function*() {
  const id = yield* responseId
  yield* audited(id)
  yield* decodeStrict(RetrieveQuery)(yield* queryOf)
  const row = yield* (yield* StoredResponses).get(id, (yield* AuthenticatedKey).id)
  return json(JSON.parse(row.response))
}))

export const deleteStoredResponse = authenticated(Effect.gen(function*() {
  const id = yield* responseId
  yield* audited(id)
  yield* (yield* StoredResponses).remove(id, (yield* AuthenticatedKey).id)
  return json({ id, object: "response", deleted: true })
}))

/** An input message as `ResponseInputMessageItem` lists it: typed, content as parts, with a status. */
const listed = (item: JsonItem): JsonItem => {
  const isMessage = item["type"] === "message" || (item["type"] === undefined && "role" in item)
  if (!isMessage) return item
  const content = item["content"]
  const partType = item["role"] === "assistant" ? "output_text" : "input_text"
  return {
    ...item,
    type: "message",
    content: typeof content === "string" ? [{ type: partType, text: content }] : content,
    status: item["status"] ?? "completed"
  }
}

export const listStoredInputItems = authenticated(Effect.gen(function*() {
  const id = yield* responseId
  yield* audited(id)
  const query = yield* decodeStrict(ItemsQuery)(yield* queryOf)
  const row = yield* (yield* StoredResponses).get(id, (yield* AuthenticatedKey).id)
  const items = (JSON.parse(row.input_items) as ReadonlyArray<JsonItem>).map(listed)
  // `desc` (OpenAI's default) lists the newest input item first.
  const ordered = query.order === "asc" ? items : [...items].reverse()
  let start = 0
  if (query.after !== undefined) {
    const at = ordered.findIndex((item) => item["id"] === query.after)
    if (at < 0) {
      return yield* new ValidationFailed({ message: `no input item "${query.after}" in response "${id}"`, details: { field: "after" } })
    }
    start = at + 1
  }
  const limit = query.limit ?? 20
  const data = ordered.slice(start, start + limit)
  return json({
    object: "list",
    data,
    first_id: (data[0]?.["id"] as string | undefined) ?? null,
    last_id: (data[data.length - 1]?.["id"] as string | undefined) ?? null,
    has_more: start + limit < ordered.length
  })
}))

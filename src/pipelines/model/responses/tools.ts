/**
 * Codex's tool forms around a translating adapter (issue 24 item 2; the rules are in
 * src/wire/translate/responses-tools.ts): the body the adapter translates has them flattened to
 * functions, and the answer goes back with calls of custom tools as `custom_tool_call` items
 * (streamed as `response.custom_tool_call_input.delta`/`.done` in place of the arguments
 * events) and namespaced calls under their own names. Events are renumbered only when a custom
 * call changed their count. A request without such tools passes through untouched.
 */
import { Effect, Stream } from "effect"
import { customInput, flattenResponsesTools, type ToolNames } from "../../../wire/translate/responses-tools.ts"
import type { ClientEvent } from "../adapter.ts"
import type { AnswerSession } from "../pipeline.ts"
import { flattenEach } from "../stream-chunks.ts"

type Json = Record<string, unknown>

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

const mapResponse = (response: Json, names: ToolNames): Json =>
  Array.isArray(response["output"]) ? { ...response, output: response["output"].map((item) => (isObject(item) ? names.outputItem(item) : item)) } : response

const event = (value: Json): ClientEvent => ({ event: value["type"] as string, data: JSON.stringify(value), value })

/** Per stream: the custom calls under way (their arguments are held until whole), and the numbering. */
const eventMapper = (names: ToolNames) => {
  const custom = new Map<string, string>()
  let next: number | undefined
  let renumber = false
  const numbered = (values: ReadonlyArray<Json>): Array<ClientEvent> =>
    values.map((value) => {
      if (typeof value["sequence_number"] !== "number") return event(value)
      next ??= value["sequence_number"]
      const sequence = next++
      return renumber && sequence !== value["sequence_number"] ? event({ ...value, sequence_number: sequence }) : event(value)
    })
  return (client: ClientEvent): ReadonlyArray<ClientEvent> => {
    const value = client.value
    if (!isObject(value)) return [client]
    const type = value["type"]
    const itemId = typeof value["item_id"] === "string" ? value["item_id"] : undefined
    switch (type) {
      case "response.output_item.added":
      case "response.output_item.done": {
        const item = value["item"]
        if (!isObject(item)) break
        const mapped = names.outputItem(item)
        if (mapped === item) break
        if (mapped["type"] === "custom_tool_call" && type === "response.output_item.added" && typeof item["id"] === "string") {
          custom.set(item["id"], "")
        }
        return numbered([{ ...value, item: mapped }])
      }
      case "response.function_call_arguments.delta":
        if (itemId === undefined || !custom.has(itemId)) break
        custom.set(itemId, custom.get(itemId)! + (typeof value["delta"] === "string" ? value["delta"] : ""))
        renumber = true
        return []
      case "response.function_call_arguments.done": {
        if (itemId === undefined || !custom.has(itemId)) break
        const args = typeof value["arguments"] === "string" ? value["arguments"] : custom.get(itemId)!
        custom.delete(itemId)
        renumber = true
        const text = customInput(args)
        const where = { item_id: itemId, output_index: value["output_index"] }
        return numbered([
          { type: "response.custom_tool_call_input.delta", ...where, delta: text, sequence_number: 0 },
          { type: "response.custom_tool_call_input.done", ...where, input: text, sequence_number: 0 }
        ])
      }
      default:
        if (isObject(value["response"])) return numbered([{ ...value, response: mapResponse(value["response"], names) }])
    }
    return numbered([value])
  }
}

/** `session` with Codex's tool forms flattened for the adapter and restored in the answer. */
export const withCodexTools = (session: AnswerSession): AnswerSession => {
  const { raw, names } = flattenResponsesTools(session.context.raw)
  if (names.empty && raw === session.context.raw) return session
  return {
    context: { ...session.context, raw },
    complete: (body) => session.complete(isObject(body) && !names.empty ? mapResponse(body, names) : body),
    stream: (events) => names.empty ? session.stream(events) : session.stream(flattenEach(Stream.map(events, eventMapper(names))))
  }
}

export const codexToolsSession = <R, E>(session: Effect.Effect<AnswerSession, E, R>, translated: boolean) =>
  translated ? Effect.map(session, withCodexTools) : session

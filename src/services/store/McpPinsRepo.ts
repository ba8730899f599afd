/**
 * Pinned definitions of upstream MCP tools (issue 37): each tool's name, description and input
 * schema as the gateway first saw it or an admin last approved it, shared by every replica.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import { decodeRows } from "./rows.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

const PinRow = Schema.Struct({ tool: Schema.String, definition: Schema.String })
const decodePins = decodeRows(PinRow)

export interface ToolPin {
  readonly tool: string
  /** The canonical JSON of the pinned definition. */
  readonly definition: string
}

export class McpPinsRepo extends Context.Service<McpPinsRepo, {
  /** The server's pins, by tool name. */
  readonly pinsOf: (server: string) => Effect.Effect<ReadonlyMap<string, string>, StoreError>
  /** Pins tools seen for the first time; a tool pinned already (by another replica, say) keeps its pin. */
  readonly pinNew: (server: string, pins: ReadonlyArray<ToolPin>, now: string) => Effect.Effect<void, StoreError>
  /** An admin's approval: these definitions replace the pins. */
  readonly approve: (server: string, pins: ReadonlyArray<ToolPin>, now: string) => Effect.Effect<void, StoreError>
}>()("modelgate/McpPinsRepo") {
  static readonly layer = Layer.effect(
    McpPinsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const rows = (server: string, pins: ReadonlyArray<ToolPin>, now: string) =>
        pins.map((p) => ({ server, tool: p.tool, definition: p.definition, pinned_at: now })) as unknown as [Record<string, unknown>, ...Array<Record<string, unknown>>]
      return McpPinsRepo.of({
        pinsOf: (server) =>
          sql`SELECT tool, definition FROM mcp_tool_pins WHERE server = ${server}`.pipe(
            decodePins,
            Effect.map((found) => new Map(found.map((row) => [row.tool, row.definition]))),
            storeOp("McpPinsRepo.pinsOf")
          ),
        pinNew: (server, pins, now) =>
          pins.length === 0 ? Effect.void : sql`INSERT INTO mcp_tool_pins ${sql.insert(rows(server, pins, now))} ON CONFLICT (server, tool) DO NOTHING`.pipe(
            Effect.asVoid,
            storeOp("McpPinsRepo.pinNew")
          ),
        approve: (server, pins, now) =>
          pins.length === 0 ? Effect.void : sql`INSERT INTO mcp_tool_pins ${sql.insert(rows(server, pins, now))}
            ON CONFLICT (server, tool) DO UPDATE SET definition = excluded.definition, pinned_at = excluded.pinned_at`.pipe(
            Effect.asVoid,
            storeOp("McpPinsRepo.approve")
          )
      })
    })
  )
}

/**
 * `GET /openapi.json`: the admin API as an OpenAPI 3.1 document, its bodies and query parameters
 * compiled from the very schemas the handlers decode with (Schema.toJsonSchemaDocument), so the
 * description cannot drift from what is enforced. A test checks every admin route is described.
 *
 * Public, like /healthz: it names routes and fields, never data, and tools (code generators,
 * API explorers) fetch it before they hold a token. Every operation in it requires the admin
 * token (`bearerAuth`).
 */
import { Effect, Schema } from "effect"
import { ConnectionChange, ConnectionInput } from "../../services/sql/Connections.ts"
import { CreateKeyInput, RotateKeyInput, UpdateKeyInput } from "../../services/keys/ApiKeys.ts"
import { json } from "../../pipelines/respond.ts"
import { route } from "../router.ts"
import { ApproveToolsInput, AuditQuery, ConnectionsQuery, GrantInput, KeysQuery, LedgerQuery, TopUp, UsageQuery } from "./admin.ts"
import { SubjectsQuery } from "./admin-subjects.ts"
import { TeamsQuery } from "./admin-teams.ts"
import { CreateTeamInput, UpdateTeamInput } from "../../services/teams/Teams.ts"

type Json = Record<string, unknown>

interface Operation {
  readonly method: "get" | "post" | "put" | "patch" | "delete"
  /** OpenAPI's spelling: `{id}`, not the router's `:id`. */
  readonly path: string
  readonly summary: string
  readonly body?: Schema.Top | undefined
  readonly query?: Schema.Struct<any> | undefined
  /** The success status: 200 with a JSON body unless said otherwise. */
  readonly status?: 200 | 201 | 204
}

const OPERATIONS: ReadonlyArray<Operation> = [
  { method: "get", path: "/api-keys", summary: "Keys with their connection grants, newest first, a page at a time, filtered", query: KeysQuery },
  { method: "post", path: "/api-keys", summary: "Create a key (the full key is in this answer only)", body: CreateKeyInput, status: 201 },
  { method: "get", path: "/api-keys/{id}", summary: "One key" },
  { method: "patch", path: "/api-keys/{id}", summary: "Change a key's fields", body: UpdateKeyInput },
  { method: "delete", path: "/api-keys/{id}", summary: "Delete a key", status: 204 },
  { method: "post", path: "/api-keys/{id}/rotate", summary: "Replace a key's secret (optional grace for the old one)", body: RotateKeyInput },
  { method: "post", path: "/api-keys/{id}/revoke", summary: "Deactivate a key" },
  { method: "post", path: "/api-keys/{id}/budget/reset", summary: "Forget what a key used of its budget (requests and credits, every period)" },
  { method: "put", path: "/api-keys/{id}/connections/{connection_id}", summary: "Grant a key a role on a connection (roles only go up)", body: GrantInput },
  { method: "delete", path: "/api-keys/{id}/connections/{connection_id}", summary: "Revoke a key's grant on a connection", status: 204 },
  { method: "get", path: "/connections", summary: "Database connections (passwords masked), by id, a page at a time", query: ConnectionsQuery },
  { method: "post", path: "/connections", summary: "Add a database connection", body: ConnectionInput, status: 201 },
  { method: "patch", path: "/connections/{connection_id}", summary: "Change a connection added through this API", body: ConnectionChange },
  { method: "delete", path: "/connections/{connection_id}", summary: "Delete a connection added through this API, with its grants", status: 204 },
  { method: "post", path: "/connections/{connection_id}/test", summary: "Connect with each of the connection's URLs and report" },
  { method: "get", path: "/models", summary: "The configured models with their providers and credits" },
  { method: "get", path: "/models/routing", summary: "Every model and route with its deployments: cooldowns (cause, end), recent errors, in-flight, time to first byte" },
  { method: "get", path: "/mcp/servers", summary: "Upstream MCP servers as this replica sees them: status, last error, tools served, tools withheld for a changed definition" },
  { method: "post", path: "/mcp/servers/{name}/approve", summary: "Approve the current definitions of a server's withheld tools (all, or those named)", body: ApproveToolsInput },
  { method: "get", path: "/workspace", summary: "The workspace and its credit pool" },
  { method: "post", path: "/workspace/credits", summary: "Top up the credit pool", body: TopUp },
  { method: "get", path: "/workspace/ledger", summary: "Credit movements, newest first", query: LedgerQuery },
  { method: "get", path: "/usage", summary: "Spend reports: requests, tokens by kind, credits and (with credits.currency) cost from the audit trail, grouped by any of day, key, team, model, provider, end_user; JSON, or CSV for Accept: text/csv or format=csv", query: UsageQuery },
  { method: "get", path: "/audit", summary: "The audit trail, newest first, filtered", query: AuditQuery },
  { method: "get", path: "/subjects", summary: "Identity-provider subjects seen, the newest first, a page at a time", query: SubjectsQuery },
  { method: "get", path: "/subjects/{id}", summary: "One identity-provider subject" },
  { method: "post", path: "/subjects/{id}/budget/reset", summary: "Forget what a subject used of its budget (every period)" },
  { method: "get", path: "/teams", summary: "Teams with their budgets, limits and key counts, newest first, a page at a time", query: TeamsQuery },
  { method: "post", path: "/teams", summary: "Create a team (budget in credits, shared limits, model list narrowing its keys')", body: CreateTeamInput, status: 201 },
  { method: "get", path: "/teams/{id}", summary: "One team" },
  { method: "patch", path: "/teams/{id}", summary: "Change a team's name, models, budget or limits (null removes one)", body: UpdateTeamInput },
  { method: "delete", path: "/teams/{id}", summary: "Delete a team without keys (409 while keys are in it)", status: 204 },
  { method: "post", path: "/admin/reload", summary: "Reload models, providers, limits, identity-provider policies, routing, count_tokens, moderations, responses and per-request MCP settings from the configuration (as SIGHUP does)" }
]

/** The router's pattern of an operation's path (`{id}` -> `:id`), for the test that compares the two. */
export const DESCRIBED_ROUTES: ReadonlyArray<string> = OPERATIONS.map((o) => `${o.method.toUpperCase()} ${o.path.replace(/\{(\w+)\}/g, ":$1")}`)

/** A schema as OpenAPI 3.1 wants it: JSON Schema 2020-12, its definitions under components. */
const compile = (schema: Schema.Top, components: Json): Json => {
  const document = Schema.toJsonSchemaDocument(schema as never, { onExcessProperty: "error" }) as unknown as { schema: Json; definitions?: Json }
  const moveRefs = (value: unknown): unknown =>
    Array.isArray(value)
      ? value.map(moveRefs)
      : typeof value === "object" && value !== null
      ? Object.fromEntries(Object.entries(value).map(([k, v]) =>
        [k, k === "$ref" && typeof v === "string" ? v.replace(/^#\/\$defs\//, "#/components/schemas/") : moveRefs(v)]
      ))
      : value
  for (const [name, definition] of Object.entries(document.definitions ?? {})) components[name] = moveRefs(definition)
  return moveRefs(document.schema) as Json
}

const ERROR_ENVELOPE: Json = {
  type: "object",
  required: ["status", "error", "message", "request_id"],
  properties: {
    status: { type: "integer" },
    error: { type: "string", description: "The error slug (validation_failed, not_found, conflict, ...)" },
    message: { type: "string" },
    request_id: { type: "string" },
    details: { type: "object" }
  }
}

export const openApiDocument = (version: string): Json => {
  const schemas: Json = { Error: ERROR_ENVELOPE }
  const paths: Record<string, Json> = {}
  for (const operation of OPERATIONS) {
    const parameters: Array<Json> = [...operation.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
      name: m[1],
      in: "path",
      required: true,
      schema: m[1] === "connection_id" ? { type: "integer", minimum: 1 } : { type: "string" }
    }))
    if (operation.query !== undefined) {
      const compiled = compile(operation.query, schemas) as { properties?: Record<string, Json>; required?: Array<string> }
      for (const [name, schema] of Object.entries(compiled.properties ?? {})) {
        parameters.push({ name, in: "query", required: compiled.required?.includes(name) ?? false, schema })
      }
    }
    const status = operation.status ?? 200
    paths[operation.path] = {
      ...paths[operation.path],
      [operation.method]: {
        summary: operation.summary,
        ...(parameters.length > 0 ? { parameters } : {}),
        ...(operation.body === undefined
          ? {}
          : { requestBody: { required: true, content: { "application/json": { schema: compile(operation.body, schemas) } } } }),
        responses: {
          [status]: status === 204 ? { description: "Done" } : { description: "OK", content: { "application/json": { schema: { type: "object" } } } },
          default: { description: "An error, in the gateway's one envelope", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } }
        }
      }
    }
  }
  return {
    openapi: "3.1.0",
    info: { title: "modelgate admin API", version, description: "Keys, connections, credits, usage and the audit trail. Every operation wants `Authorization: Bearer <admin token>`." },
    security: [{ bearerAuth: [] }],
    paths,
    components: { schemas, securitySchemes: { bearerAuth: { type: "http", scheme: "bearer" } } }
  }
}

export const openApiRoutes = (version: string) => {
  // Built once, when first asked for: the schemas do not change while the process runs, and
  // building it was about 2 ms of every start (most of them never serve it).
  let document: Json | undefined
  return [route("GET", "/openapi.json", Effect.sync(() => json(document ??= openApiDocument(version))))]
}

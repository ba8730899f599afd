/** Records the store keeps, as the rest of the gateway sees them. */

export type ConnectionRole = "read" | "edit"

export interface ApiKeyRecord {
  readonly id: string
  readonly workspace_id: string
  readonly name: string
  readonly key_hash: string
  readonly key_hint: string
  readonly is_active: boolean
  /** Aliases or full model ids; null means every model. */
  readonly allowed_models: ReadonlyArray<string> | null
  readonly tools_enabled: boolean
  /** Upstream MCP servers (by their config name) this key reaches through /v1/mcp; empty is none. */
  readonly mcp_servers: ReadonlyArray<string>
  /** Its budget (issue 33; amounts in micro-credits); null: none. */
  readonly budget: BudgetLimits | null
  /** Requests counted in the budget's current period (filled in from the store's budget usage where shown). */
  readonly budget_used: number
  /** Micro-credits counted in the budget's current period (as `budget_used`); absent: not read. */
  readonly budget_used_credits?: number | undefined
  readonly limits: {
    readonly requests_per_minute?: number
    readonly concurrent_streams?: number
    readonly tokens_per_minute?: number
  } | null
  readonly expires_at: string | null
  readonly created_at: string
  readonly updated_at: string
  readonly last_used_at: string | null
  /** After a rotation with a grace period, the old hash keeps working until this instant. */
  readonly previous_key_hash: string | null
  readonly previous_key_expires_at: string | null
  /** The key's team (issue 33); absent or null: none. */
  readonly team_id?: string | null | undefined
  /** The team itself, as authentication reads it with the key (KeysRepo.findKeyByHash); absent elsewhere. */
  readonly team?: TeamScope | null | undefined
}

/**
 * Who a client request acts as (decisions section 11): an API key, or a subject of an identity
 * provider whose token a policy admitted. Limits, budgets, usage and audit are kept by `id` for
 * both, so everything past authentication treats them alike.
 */
/** A UTC calendar period a budget resets on (weeks start on Monday); absent: it never resets. */
export type BudgetPeriod = "day" | "week" | "month"

/**
 * A budget of a key, a subject's policy or a team (issue 33). Amounts in micro-credits
 * (src/domain/money.ts); each maximum is optional, at least one is set.
 */
export interface BudgetLimits {
  readonly max_requests?: number | undefined
  readonly max_credits_micros?: number | undefined
  readonly period?: BudgetPeriod | undefined
}

/**
 * The team a principal belongs to (issue 33): its members' requests must also fit the team's
 * models, budget and limits.
 */
export interface TeamScope {
  readonly id: string
  readonly name: string
  /** Narrows the member's own list; null: no narrowing. */
  readonly allowed_models: ReadonlyArray<string> | null
  readonly budget: BudgetLimits | null
  readonly limits: {
    readonly requests_per_minute?: number | undefined
    readonly concurrent_streams?: number | undefined
    readonly tokens_per_minute?: number | undefined
  } | null
}

/** A team as the store keeps it (issue 33). */
export interface TeamRecord extends TeamScope {
  readonly created_at: string
  readonly updated_at: string
}

interface PrincipalScope {
  /** A key id (`key_...`), or a subject id (`sub_` + a hash of issuer and subject). */
  readonly id: string
  /** Aliases or full model ids; null means every model. */
  readonly allowed_models: ReadonlyArray<string> | null
  readonly tools_enabled: boolean
  /** Upstream MCP servers (by their config name) reachable through /v1/mcp; empty is none. */
  readonly mcp_servers: ReadonlyArray<string>
  /** The key's or the subject's policy's budget (issue 33); null: none. */
  readonly budget: BudgetLimits | null
  readonly limits: {
    readonly requests_per_minute?: number | undefined
    readonly concurrent_streams?: number | undefined
    readonly tokens_per_minute?: number | undefined
  } | null
  /** The key's team (issue 33); absent or null: none. */
  readonly team?: TeamScope | null | undefined
}

export interface KeyPrincipal extends PrincipalScope {
  readonly kind: "key"
}

export interface SubjectPrincipal extends PrincipalScope {
  readonly kind: "subject"
  /** The token's `iss` and `sub`: together, who the subject is. */
  readonly issuer: string
  readonly subject: string
  /** The policy that admitted the token; null when none matched (the request is then refused). */
  readonly policy: string | null
  /** Connection grants by connection name, from the policy (a key's live in the store instead). */
  readonly connection_grants: ReadonlyArray<{ readonly connection: string; readonly role: ConnectionRole }>
}

export type Principal = KeyPrincipal | SubjectPrincipal

/** The identity-provider subject a subject id stands for; kept so usage and audit can name it. */
export interface SubjectRecord {
  readonly id: string
  readonly issuer: string
  readonly subject: string
  readonly budget_used: number
  readonly first_seen_at: string
  readonly last_seen_at: string
}

export interface AuditRecord {
  readonly request_id: string
  readonly ts: string
  readonly key_id: string | null
  readonly method: string
  readonly endpoint: string
  readonly status: number
  readonly error: string | null
  readonly model: string | null
  readonly provider: string | null
  readonly tool: string | null
  readonly connection_id: number | null
  readonly credits: number
  readonly prompt_tokens: number | null
  readonly completion_tokens: number | null
  /** Of `prompt_tokens`, read from the provider's cache (issue 33); absent or null: unknown or none. */
  readonly cache_read_tokens?: number | null | undefined
  /** Of `prompt_tokens`, written to the provider's cache (issue 33). */
  readonly cache_write_tokens?: number | null | undefined
  /** Who the request was for, as the client named them (`user`, `metadata.user_id`, `x-modelgate-end-user`); bounded. */
  readonly end_user?: string | null | undefined
  /** The team of the key (or subject) at the time of the request. */
  readonly team_id?: string | null | undefined
  readonly duration_ms: number
  readonly stream: boolean
  readonly client_addr: string | null
  /** Small structured extras (SQL verdict, statement hash, row count, upstream status); never content. */
  readonly details: Readonly<Record<string, unknown>> | null
}

export interface AuditQuery {
  readonly key_id?: string | undefined
  readonly status?: number | undefined
  /** The error slug (`key_inactive`, ...). */
  readonly error?: string | undefined
  /** The route pattern (`/v1/chat/completions`, `/api-keys/:id`). */
  readonly endpoint?: string | undefined
  readonly since?: string | undefined
  readonly until?: string | undefined
  /** Opaque cursor from a previous page: records older than it. */
  readonly before_seq?: number | undefined
  readonly limit: number
  /** Only these kinds of traffic (see `TrafficKind`); none: every kind. */
  readonly include?: ReadonlyArray<TrafficKind> | undefined
  /** Not these kinds of traffic. */
  readonly exclude?: ReadonlyArray<TrafficKind> | undefined
  /** Only requests that may change something (not GET or HEAD). */
  readonly writes_only?: boolean | undefined
  /** Admin actions on this target (`details.target`). */
  readonly target_kind?: string | undefined
  readonly target_id?: string | undefined
}

/**
 * What a request was, by its endpoint: `api` (the /v1 model and tool API), `admin` (the admin
 * API), `app` (the admin app's pages, assets and session), `health` (/healthz, /readyz).
 */
export type TrafficKind = "api" | "admin" | "app" | "health"
export const TRAFFIC_KINDS: ReadonlyArray<TrafficKind> = ["api", "admin", "app", "health"]

export interface AuditPage {
  readonly items: ReadonlyArray<AuditRecord & { readonly seq: number }>
  readonly next_seq: number | null
}

export interface WorkspaceRecord {
  readonly id: string
  readonly name: string
  readonly credits: number
  readonly created_at: string
}

export type LedgerKind = "initial" | "charge" | "refund" | "topup"

export interface LedgerEntry {
  readonly seq: number
  readonly ts: string
  readonly kind: LedgerKind
  /** Signed: a charge is negative, a refund or top-up positive. */
  readonly amount: number
  readonly balance_after: number
  /** Who moved the credits: a key id for charges and refunds, `admin` or `cli` for top-ups. */
  readonly actor: string
  readonly key_id: string | null
  readonly request_id: string | null
  readonly model: string | null
  readonly note: string | null
}

export interface CreditMovement {
  readonly amount: number
  readonly actor: string
  readonly key_id?: string | null
  readonly request_id?: string | null
  readonly model?: string | null
  readonly note?: string | null
}

/** An open charge: held until its request ends, by the replica `owner` (decisions section 10). */
export interface Reservation {
  readonly request_id: string
  readonly owner: string
  readonly amount: number
  readonly key_id: string | null
  readonly model: string | null
  readonly method: string | null
  readonly endpoint: string | null
  readonly created_at: string
}

export interface ConnectionRecord {
  readonly id: number
  readonly name: string
  readonly dialect: "postgres" | "mysql"
  readonly url: string
  readonly read_url: string | null
  readonly default_schema: string | null
  /** `production` refuses schema changes for every key (issue 36). */
  readonly environment: "development" | "production"
  /** Reached through this SSH tunnel (config/schema.ts SshSettings); null: directly. */
  readonly ssh: ConnectionSsh | null
  /** Connections from the config file cannot be changed through the admin API. */
  readonly source: "config" | "admin"
}

/** The SSH tunnel of a connection; the inline `private_key` and `password` are secrets like a DSN's password. */
export interface ConnectionSsh {
  readonly host: string
  readonly port?: number | undefined
  readonly user: string
  readonly private_key_file?: string | undefined
  readonly private_key_env?: string | undefined
  readonly password_env?: string | undefined
  readonly private_key?: string | undefined
  readonly password?: string | undefined
  readonly host_key_sha256?: string | undefined
  readonly known_hosts_file?: string | undefined
  readonly connect_timeout_ms?: number | undefined
}

export interface GrantRecord {
  readonly key_id: string
  readonly connection_id: number
  readonly role: ConnectionRole
  readonly granted_at: string
}

export interface McpSessionRecord {
  readonly id: string
  readonly key_id: string
  readonly protocol_version: string
  readonly created_at: string
  readonly expires_at: string
}

export interface SqlHistoryItem {
  readonly ts: string
  readonly statement: string
  readonly duration_ms: number
  readonly kind: "rows" | "affected"
  readonly row_count: number
}

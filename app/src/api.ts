/**
 * The admin API as the app calls it: same origin, the session cookie sent by the browser, and
 * the session's CSRF token on every call that changes something. Errors arrive as the gateway's
 * envelope and are thrown as ApiError so forms can put the message next to the field it names.
 */

export interface Envelope {
  readonly status: number
  readonly error: string
  readonly message: string
  readonly request_id?: string
  readonly details?: Record<string, unknown>
}

export class ApiError extends Error {
  readonly status: number
  readonly slug: string
  readonly details: Record<string, unknown>
  readonly requestId: string | undefined
  constructor(envelope: Envelope) {
    super(envelope.message)
    this.status = envelope.status
    this.slug = envelope.error
    this.details = envelope.details ?? {}
    this.requestId = envelope.request_id
  }
  /** The field path the error names (`budget.max_requests`), when it names one. */
  get field(): string | undefined {
    const field = this.details.field
    return typeof field === "string" ? field : undefined
  }
}

let csrfToken = ""
let onSignedOut: () => void = () => {}

export const setCsrfToken = (token: string) => {
  csrfToken = token
}
export const whenSignedOut = (callback: () => void) => {
  onSignedOut = callback
}

const toEnvelope = async (response: Response): Promise<Envelope> => {
  try {
    const body = (await response.json()) as Envelope
    if (typeof body.error === "string" && typeof body.message === "string") return body
  } catch {
    // Not an envelope: fall through to a generic one.
  }
  return { status: response.status, error: "http_error", message: `HTTP ${response.status}` }
}

export const request = async (method: string, path: string, body?: unknown): Promise<Response> => {
  const headers: Record<string, string> = { accept: "application/json" }
  if (body !== undefined) headers["content-type"] = "application/json"
  if (method !== "GET") headers["x-csrf-token"] = csrfToken
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body)
  })
  if (!response.ok) {
    const envelope = await toEnvelope(response)
    // An expired or cleared session anywhere sends the operator back to sign-in.
    if (response.status === 401 && path !== "/app/session") onSignedOut()
    throw new ApiError(envelope)
  }
  return response
}

export const api = async <T>(method: string, path: string, body?: unknown): Promise<T> => {
  const response = await request(method, path, body)
  return (response.status === 204 ? undefined : await response.json()) as T
}

/** A query string from the set values only. */
export const query = (params: Record<string, string | number | undefined | null>): string => {
  const search = new URLSearchParams()
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== "") search.set(name, String(value))
  }
  const text = search.toString()
  return text === "" ? "" : `?${text}`
}

/**
 * The keys other pages name keys by and offer in their key menus: the newest 1,000, the admin
 * API's largest page (issue 31). Past that a key shows as its id; the keys page searches them all.
 */
export const KEY_CHOICES = "/api-keys?limit=1000"

/** Database connections are few (an operator adds each by hand): one page of the largest size holds them. */
export const ALL_CONNECTIONS = "/connections?limit=1000"

export interface KeyView {
  id: string
  name: string
  key_hint: string
  is_active: boolean
  allowed_models: Array<string> | null
  tools_enabled: boolean
  mcp_servers: Array<string>
  budget: { max_requests: number; used: number; remaining: number } | null
  limits: { requests_per_minute?: number; concurrent_streams?: number } | null
  expires_at: string | null
  created_at: string
  updated_at: string
  last_used_at: string | null
  connections?: Array<{ connection_id: number; role: "read" | "edit" }>
  key?: string
  /** The key's team (issue 33); null: none. */
  team_id?: string | null
}

/** A team as the admin API shows it (issue 33); budget amounts in credits. */
export interface TeamView {
  id: string
  name: string
  allowed_models: Array<string> | null
  budget: { max_requests: number | null; max_credits: number | null; period: "day" | "week" | "month" | null } | null
  limits: { requests_per_minute?: number; concurrent_streams?: number; tokens_per_minute?: number } | null
  key_count: number
  created_at: string
  updated_at: string
}

/** Teams are few (an operator makes each): one page of the largest size holds them. */
export const ALL_TEAMS = "/teams?limit=1000"

export interface ConnectionView {
  id: number
  name: string
  dialect: "postgres" | "mysql"
  url: string
  read_url: string | null
  default_schema: string | null
  environment: "development" | "production"
  /** The SSH tunnel, its inline secrets shown as "***"; null: reached directly. */
  ssh: Record<string, unknown> | null
  source: "config" | "admin"
}

export interface ModelView {
  name: string
  id: string
  alias: string | null
  provider: string
  credits: number
}

/** `GET /models/routing`: a deployment's counts over a window (this replica's). */
export interface RecentCounts {
  attempts: number
  errors: number
  by_error: Record<string, number>
}

export interface DeploymentRouting {
  /** null: a `match:` route's deployment that sends the requested name, not used yet. */
  key: string | null
  provider: string
  provider_kind: string
  upstream_id: string | null
  weight: number
  status: "healthy" | "cooling"
  cooldown: { until: string; seconds_left: number; cause: string | null } | null
  in_flight: number
  ttfb_seconds: number | null
  recent: { last_5m: RecentCounts; last_60m: RecentCounts } | null
}

export interface ModelRouting {
  kind: "model" | "route"
  name: string
  id: string | null
  alias: string | null
  match: string | null
  display_name: string | null
  endpoints: Array<string>
  credits: number
  max_tokens: number
  fallbacks: Array<string>
  deployments: Array<DeploymentRouting>
}

export interface RoutingView {
  replica: string
  generated_at: string
  cooldowns: "shared" | "replica" | "replica_redis_unavailable"
  data: Array<ModelRouting>
}

export interface LedgerEntry {
  seq: number
  ts: string
  kind: "initial" | "charge" | "refund" | "topup"
  amount: number
  balance_after: number
  actor: string
  key_id: string | null
  request_id: string | null
  model: string | null
  note: string | null
}

export interface AuditRecord {
  seq: number
  request_id: string
  ts: string
  key_id: string | null
  method: string
  endpoint: string
  status: number
  error: string | null
  model: string | null
  provider: string | null
  tool: string | null
  connection_id: number | null
  credits: number
  prompt_tokens: number | null
  completion_tokens: number | null
  /** Issue 33: of prompt_tokens, cache reads and writes; the end user named; the key's team. */
  cache_read_tokens: number | null
  cache_write_tokens: number | null
  end_user: string | null
  team_id: string | null
  duration_ms: number
  stream: boolean
  client_addr: string | null
  details: Record<string, unknown> | null
}

export interface UsageRow {
  day?: string
  key_id?: string | null
  team_id?: string | null
  model?: string | null
  provider?: string | null
  end_user?: string | null
  requests: number
  errors: number
  prompt_tokens: number
  completion_tokens: number
  /** Issue 33: input split into uncached, cache reads and cache writes. */
  input_tokens?: number
  output_tokens?: number
  cache_read_tokens?: number
  cache_write_tokens?: number
  /** Decimal credits (six fractional digits at most). */
  credits: number
  /** Present when `credits.currency` is configured. */
  cost?: { amount: number; currency: string }
}

/** `GET /usage`: the rows and what a credit is worth (null: no currency configured). */
export interface UsageReport {
  since: string | null
  until: string | null
  group_by: Array<string>
  currency: { code: string; per_credit: string } | null
  data: Array<UsageRow>
}

/**
 * The shape of modelgate.yaml (docs/decisions.md section 2). Snake case on purpose: these are the
 * names operators write in YAML and in MODELGATE_* variables.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SchemaAST from "effect/SchemaAST"
import { BudgetInput, DecimalCredits } from "../../domain/budget-input.ts"
import { MAX_TRUSTED_PROXIES, MAX_TRUSTED_PROXY_CHARS } from "../../domain/trusted-proxies.ts"
const def = <S extends Schema.Top>(schema: S, value: S["Encoded"]) =>
  schema.pipe(Schema.withDecodingDefault(Effect.succeed(value)))

const PositiveInt = Schema.Int.check(Schema.isGreaterThan(0))
const NonNegativeInt = Schema.Int.check(Schema.isGreaterThanOrEqualTo(0))
/** `limits.tokens_per_minute` wherever it is set (services/limits/token-bucket.ts MAX_TOKENS_PER_MINUTE). */
export const TokensPerMinute = Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 1_000_000_000 }))
const Port = Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 65535 }))

export const Timeouts = Schema.Struct({
  connect_ms: def(PositiveInt, 5_000),
  first_byte_ms: def(PositiveInt, 60_000),
  idle_ms: def(PositiveInt, 60_000)
})

export const ProviderConfig = Schema.Struct({
  name: Schema.NonEmptyString,
  kind: Schema.Literals(["openai", "anthropic", "echo", "bedrock", "azure", "gemini", "vertex"]),
  base_url: Schema.optional(Schema.String),
  api_key: Schema.optional(Schema.String),
  api_key_env: Schema.optional(Schema.String),
  anthropic_version: def(Schema.String, "2023-06-01"),
  /**
   * OpenAI kind only: the provider serves the Responses API (`POST /responses`), so Responses
   * clients are forwarded to it as they are; otherwise they are translated to Chat Completions.
   */
  responses_api: def(Schema.Boolean, false),
  /** Bedrock kind: the AWS region (SigV4 scope, and the default base URL's host). */
  region: Schema.optional(Schema.NonEmptyString),
  /** Bedrock kind: AWS credentials, each literal or the name of a variable holding it, like api_key. */
  access_key_id: Schema.optional(Schema.String),
  access_key_id_env: Schema.optional(Schema.String),
  secret_access_key: Schema.optional(Schema.String),
  secret_access_key_env: Schema.optional(Schema.String),
  session_token: Schema.optional(Schema.String),
  session_token_env: Schema.optional(Schema.String),
  /** Azure kind: the `api-version` query parameter of every call (e.g. 2025-04-01-preview). */
  api_version: Schema.optional(Schema.NonEmptyString),
  /** Vertex kind: the Google Cloud project and location, and the service account's key file. */
  project: Schema.optional(Schema.NonEmptyString),
  location: Schema.optional(Schema.NonEmptyString),
  credentials_file: Schema.optional(Schema.NonEmptyString),
  max_connections: def(PositiveInt, 64),
  timeouts: def(Timeouts, {}),
  /**
   * The largest answer the gateway reads whole from this provider (a non-streamed completion,
   * message, count, Bedrock embedding); a larger one is a 502 and is not held (issue 22, finding 5).
   */
  max_response_bytes: def(PositiveInt, 16_777_216),
  /** The largest answer relayed as it arrives without being held (OpenAI-kind embeddings); a larger one is cut. */
  max_relayed_bytes: def(PositiveInt, 268_435_456)
})
export type ProviderConfig = typeof ProviderConfig.Type

/** One place a model is served: a provider, the id it knows the model by, and its share of requests. */
export const DeploymentConfig = Schema.Struct({
  provider: Schema.NonEmptyString,
  /** The id sent upstream; default the model entry's `id` (for a route: the requested name). */
  id: Schema.optional(Schema.NonEmptyString),
  /** Relative share under the `weighted` strategy. */
  weight: def(Schema.Finite.check(Schema.isGreaterThan(0)), 1)
})
export type DeploymentConfig = typeof DeploymentConfig.Type

/**
 * `routing:` (issue 20): how a request picks among a model's deployments, retries and falls back.
 * Retries and fallbacks happen only before anything of the answer reached the client, except with
 * `stream_continuation`.
 */
export const RoutingConfig = Schema.Struct({
  /** Further attempts after the first, on other deployments (or fallbacks) of the request. */
  retries: def(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 10 })), 2),
  /** How long a failing deployment leaves the rotation (a longer Retry-After wins, up to `max_cooldown_seconds`). */
  cooldown_seconds: def(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3600 })), 30),
  /** The longest cooldown a provider's Retry-After may ask for (issue 32 item 3). */
  max_cooldown_seconds: def(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 86_400 })), 300),
  /**
   * Failures of this many distinct requests within `allowed_fails_window_seconds` are tolerated;
   * the next one cools the deployment (issue 32 item 3: one client's requests must not take a
   * deployment out of rotation for everyone). Failures only the deployment can cause (it cannot
   * be reached, it refused the gateway's credentials) cool it at once; a refusal of the request
   * itself never does. Counted per replica.
   */
  allowed_fails: def(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 100 })), 3),
  allowed_fails_window_seconds: def(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3600 })), 60),
  strategy: def(Schema.Literals(["weighted", "least_busy", "latency"]), "weighted"),
  /** Continue a stream cut after its first events on another deployment or fallback. */
  stream_continuation: def(Schema.Boolean, false),
  /** Fallbacks for every model that lists none of its own. */
  default_fallbacks: def(Schema.Array(Schema.NonEmptyString), []),
  /** First backoff between attempts; doubled each retry, with jitter. */
  backoff_ms: def(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 60_000 })), 200),
  /** A Retry-After up to this long is waited for; a longer one moves to another deployment at once. */
  max_retry_wait_ms: def(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 60_000 })), 2_000),
  /** No new attempt starts later than this after the request arrived. */
  deadline_ms: def(PositiveInt, 120_000)
})
export type RoutingConfig = typeof RoutingConfig.Type

/**
 * `models[].price` (issue 33): credits per 1,000,000 tokens of each kind. `cache_read` and
 * `cache_write` (input read from or written to the provider's prompt cache) default to `input`;
 * thinking and reasoning tokens are output. Added to the model's `credits` (src/domain/pricing.ts).
 */
export const PriceConfig = Schema.Struct({
  input: DecimalCredits,
  output: DecimalCredits,
  cache_read: Schema.optional(DecimalCredits),
  cache_write: Schema.optional(DecimalCredits)
})
export type PriceConfig = typeof PriceConfig.Type

/**
 * One entry of `models:`. Either a model (`id`, optionally `alias` and `display_name`) or a
 * route (`match`, a pattern like `claude-*`) that serves every name it matches, passing the
 * requested name upstream unless `id` names the one model to send instead. Which fields may be
 * combined is checked after decoding (load.ts), so each mistake is named by its field.
 */
export const ModelConfig = Schema.Struct({
  alias: Schema.optional(Schema.NonEmptyString),
  id: Schema.optional(Schema.NonEmptyString),
  match: Schema.optional(Schema.NonEmptyString),
  display_name: Schema.optional(Schema.NonEmptyString),
  /** The one provider serving it; or, instead, `deployments` (load.ts requires exactly one of them). */
  provider: Schema.optional(Schema.NonEmptyString),
  /** Several providers serving the same model, chosen per request by `routing.strategy` (issue 20). */
  deployments: Schema.optional(Schema.Array(DeploymentConfig)),
  /**
   * Models (names or aliases) tried in order when every deployment failed or cools down, or the
   * vendor refused the request as too long for its context window.
   */
  fallbacks: Schema.optional(Schema.Array(Schema.NonEmptyString)),
  /**
   * Whether a key whose `allowed_models` does not cover this model may still be answered by it
   * when it is reached as another model's fallback. Off: a fallback is skipped for such a key.
   */
  allow_via_fallback: Schema.optional(Schema.Boolean),
  /** The flat price per request, in credits (decimals: issue 33). */
  credits: def(DecimalCredits, 1),
  /** Token prices (issue 33): the request's cost is `credits` plus its tokens at these prices. */
  price: Schema.optional(PriceConfig),
  max_tokens: def(PositiveInt, 4096),
  /**
   * What the model serves: `chat` (every generation format: chat completions, messages,
   * responses, count_tokens) and/or `embeddings`. Asking a model for what it does not serve is
   * a 400 naming the model.
   */
  endpoints: def(Schema.Array(Schema.Literals(["chat", "embeddings"])), ["chat"]),
  /**
   * Whether the model reasons, so takes reasoning fields (`reasoning_effort`, Anthropic
   * `thinking`/`output_config.effort`) when a request is translated for it. Absent: decided
   * from the id (catalog/reasoning.ts).
   */
  reasoning: Schema.optional(Schema.Boolean)
})
export type ModelConfig = typeof ModelConfig.Type
export type ModelEndpoint = ModelConfig["endpoints"][number]

const SshText = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(1024))
const SSH_AUTH = ["private_key_file", "private_key_env", "password_env", "private_key", "password"] as const
const SSH_HOST_KEY = ["host_key_sha256", "known_hosts_file"] as const

/**
 * `connections[].ssh` (issue 36): the database is reached through an SSH tunnel (`direct-tcpip`
 * to the URL's host and port, opened by the bastion). Exactly one way to log in, and exactly
 * one way to know the bastion's host key: there is no trust on first use.
 */
export const SshSettings = Schema.Struct({
  host: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(255)),
  port: Schema.optional(Schema.Int.check(Schema.isGreaterThan(0), Schema.isLessThanOrEqualTo(65_535))),
  user: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200)),
  private_key_file: Schema.optional(SshText),
  private_key_env: Schema.optional(SshText),
  password_env: Schema.optional(SshText),
  /** Inline secrets, for the admin API (sealed at rest with `secrets.key`, never shown back). */
  private_key: Schema.optional(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(16_384))),
  password: Schema.optional(SshText),
  /** OpenSSH's fingerprint form, `SHA256:` and the unpadded base64 of the key's SHA-256. */
  host_key_sha256: Schema.optional(
    Schema.String.check(Schema.isPattern(/^SHA256:[A-Za-z0-9+/]{43}=?$/, { expected: "an OpenSSH fingerprint, SHA256:<43 base64 characters>" }))
  ),
  known_hosts_file: Schema.optional(SshText),
  /** How long reaching and logging in to the bastion may take (default 10 s). */
  connect_timeout_ms: Schema.optional(Schema.Int.check(Schema.isGreaterThanOrEqualTo(100), Schema.isLessThanOrEqualTo(60_000)))
}).check(
  Schema.makeFilter((s) => SSH_AUTH.filter((k) => s[k] !== undefined).length === 1, {
    expected: `exactly one of ${SSH_AUTH.join(", ")}`
  }),
  Schema.makeFilter((s) => SSH_HOST_KEY.filter((k) => s[k] !== undefined).length === 1, {
    expected: `exactly one of ${SSH_HOST_KEY.join(", ")} (the bastion's host key is never trusted on first use)`
  })
)
export type SshSettings = typeof SshSettings.Type

/** `production` refuses every schema change, whatever the key's role (issue 36). */
/** A positive decimal written as a YAML number or a string (`0.01`, "0.000003"): at most 12 digits each side of the point. */
const DECIMAL = /^\d{1,12}(\.\d{1,12})?$/
const PositiveDecimal = Schema.Union([Schema.String, Schema.Finite]).check(
  Schema.makeFilter((value: string | number) => {
    const text = String(value)
    return DECIMAL.test(text) && /[1-9]/.test(text)
  }, { expected: "a positive decimal such as 0.01 (at most 12 digits before and after the point)" })
)

/**
 * `credits.currency`: the money a credit stands for, so spend reports show `cost` next to
 * credits (issue 33). `code` is an ISO 4217-style code (`USD`, `EUR`); `per_credit` what one
 * credit costs in it.
 */
export const CurrencyConfig = Schema.Struct({
  code: Schema.String.check(Schema.isPattern(/^[A-Z]{3}$/, { message: "expected a three-letter ISO 4217 code such as USD" })),
  per_credit: PositiveDecimal
})

export const ConnectionEnvironment = Schema.Literals(["development", "production"])
export type ConnectionEnvironment = typeof ConnectionEnvironment.Type

export const ConnectionConfig = Schema.Struct({
  id: PositiveInt,
  name: Schema.NonEmptyString,
  dialect: Schema.Literals(["postgres", "mysql"]),
  url: Schema.NonEmptyString,
  read_url: Schema.optional(Schema.NonEmptyString),
  default_schema: Schema.optional(Schema.NonEmptyString),
  environment: Schema.optional(ConnectionEnvironment),
  ssh: Schema.optional(SshSettings)
})
export type ConnectionConfig = typeof ConnectionConfig.Type

/**
 * `auth.oidc`: identity-provider tokens (decisions section 11). Each issuer lists policies; the
 * first whose `when` matches the token's claims gives the token its permissions. Cross-field
 * rules (issuer URL, one kind of condition, ...) are checked after decoding (load.ts).
 */
/** An upstream MCP server's name (issue 37): its tools reach clients as `<name>__<tool>`. */
export const MCP_SERVER_NAME = /^[a-z0-9_-]{1,32}$/

const HeaderName = Schema.String.check(Schema.isPattern(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { message: "expected an HTTP header name" }))
const HeaderValue = Schema.String.check(Schema.isPattern(/^[^\r\n]*$/, { message: "a header value cannot contain a line break" }))

/**
 * `mcp.servers[]`: an MCP server the gateway serves behind /v1/mcp, to the keys that name it in
 * `mcp_servers`: reached over Streamable HTTP (`url`), or a process the gateway starts and talks
 * to on stdio (`command`); one of the two (load.ts).
 */
export const McpServerConfig = Schema.Struct({
  name: Schema.String.check(Schema.isPattern(MCP_SERVER_NAME, { message: "expected [a-z0-9_-]{1,32}" })),
  url: Schema.optional(Schema.String.check(Schema.isPattern(/^https?:\/\/[^\s]+$/, { message: "expected http://... or https://..." }))),
  /** Sent with every request to the server; a value may hold `${VAR}`, replaced from the environment. Never logged or shown. */
  headers: def(Schema.Record(HeaderName, HeaderValue), {}),
  /** A stdio server: the program (a bare name is looked up in the gateway's PATH), its arguments and its whole environment. */
  command: Schema.optional(Schema.NonEmptyString),
  args: def(Schema.Array(Schema.String).check(Schema.isMaxLength(256)), []),
  /** The process's only environment (nothing of the gateway's is inherited); values may hold `${VAR}` like headers. */
  env: def(Schema.Record(Schema.String.check(Schema.isPattern(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: "expected an environment variable name" })), Schema.String), {}),
  /** The server's tool names clients may see and call (`*` matches any run of characters); absent: all. */
  tools: Schema.optional(Schema.Array(Schema.NonEmptyString.check(Schema.isMaxLength(128))).check(Schema.isMaxLength(1000))),
  /** Credits per tools/call; absent: `mcp.credits_per_tool_call`. */
  credits_per_call: Schema.optional(NonNegativeInt),
  /** The most one call (and one listing) may take before it is answered as this server's timeout. */
  timeout_ms: def(PositiveInt, 30_000)
})
export type McpServerConfig = typeof McpServerConfig.Type

export const OidcClaimCondition = Schema.Struct({
  /** Claim name (`groups`), or a dotted path into nested claims (`realm_access.roles`). */
  claim: Schema.NonEmptyString,
  /** The claim equals this value (or, when the claim is an array, holds it). */
  equals: Schema.optional(Schema.Union([Schema.String, Schema.Number, Schema.Boolean])),
  /** The claim is an array holding this value, or a space-separated string (`scope`) naming it. */
  includes: Schema.optional(Schema.String)
})
export type OidcClaimCondition = typeof OidcClaimCondition.Type

export const OidcPolicyConfig = Schema.Struct({
  /** Shown in audit records and errors. */
  name: Schema.NonEmptyString,
  /** Absent: every token of the issuer matches (a catch-all, last). A list: every condition must hold. */
  when: Schema.optional(Schema.Union([OidcClaimCondition, Schema.Array(OidcClaimCondition)])),
  /** Aliases or full ids; absent means every model. */
  allowed_models: Schema.optional(Schema.Array(Schema.NonEmptyString)),
  tools_enabled: def(Schema.Boolean, false),
  /** Upstream MCP servers (`mcp.servers` names) the subject reaches through /v1/mcp; default none. */
  mcp_servers: def(Schema.Array(Schema.String.check(Schema.isPattern(MCP_SERVER_NAME, { message: "expected [a-z0-9_-]{1,32}" }))), []),
  /** Connection grants by connection name. */
  connections: def(Schema.Array(Schema.Struct({
    connection: Schema.NonEmptyString,
    role: Schema.Literals(["read", "edit"])
  })), []),
  /** What each subject may use (requests and/or credits), per UTC period or for as long as the store keeps it (issue 33). */
  budget: Schema.optional(BudgetInput),
  limits: Schema.optional(Schema.Struct({
    requests_per_minute: Schema.optional(PositiveInt),
    concurrent_streams: Schema.optional(PositiveInt),
    tokens_per_minute: Schema.optional(TokensPerMinute)
  }))
})
export type OidcPolicyConfig = typeof OidcPolicyConfig.Type

export const OidcIssuerConfig = Schema.Struct({
  /** Exactly the `iss` its tokens carry: https, or http on loopback for development. */
  issuer: Schema.NonEmptyString,
  /** The `aud` a token must carry (one of them, when a list). */
  audience: Schema.Union([Schema.NonEmptyString, Schema.Array(Schema.NonEmptyString)]),
  /** Absent: the `jwks_uri` of the issuer's discovery document. */
  jwks_url: Schema.optional(Schema.NonEmptyString),
  /** Accepted signing algorithms; default every asymmetric one (never HS* or none). */
  algorithms: Schema.optional(Schema.Array(Schema.NonEmptyString)),
  clock_skew_seconds: def(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 300 })), 30),
  /**
   * A token signed under a key id the cached key set lacks refetches the set, at most once per
   * this many seconds (a flood of made-up key ids must not become a flood of fetches).
   */
  jwks_cooldown_seconds: def(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 3600 })), 30),
  policies: Schema.Array(OidcPolicyConfig)
})
export type OidcIssuerConfig = typeof OidcIssuerConfig.Type

/** `admin.oidc`: sign-in to the admin app and bearer tokens for the admin API from one OpenID Connect issuer. */
export const AdminOidcConfig = Schema.Struct({
  issuer: Schema.NonEmptyString,
  /** The name on the app's sign-in button; default: the issuer's host. */
  name: Schema.optional(Schema.NonEmptyString.check(Schema.isMaxLength(60))),
  client_id: Schema.NonEmptyString,
  /** Absent: a public client (PKCE only, no client authentication at the token endpoint). */
  client_secret: Schema.optional(Schema.NonEmptyString),
  /** `aud` that admin API bearer tokens must carry; default: client_id. */
  audience: Schema.optional(Schema.NonEmptyString),
  /** Who is an admin: the same kind of claim condition as an auth.oidc policy's `when` (one of equals, includes). */
  admin_claim: OidcClaimCondition,
  scopes: def(Schema.Array(Schema.NonEmptyString), ["openid", "email", "profile"]),
  /**
   * The gateway's URL as browsers reach it (`https://gateway.example.com`); the redirect URI to
   * register is `<public_url>/app/oidc/callback`. Never taken from a request's Host header.
   * Optional on a loopback host, where the bound address is used.
   */
  public_url: Schema.optional(Schema.NonEmptyString),
  /** Absent: from the issuer's discovery document. */
  jwks_url: Schema.optional(Schema.NonEmptyString),
  /**
   * How the gateway authenticates at the token endpoint (issue 26, item 13). Absent:
   * client_secret_basic with a client_secret, none (a public client, PKCE only) without one.
   */
  token_endpoint_auth_method: Schema.optional(Schema.Literals(["client_secret_basic", "client_secret_post", "private_key_jwt", "none"])),
  /** private_key_jwt's signing key: a PKCS#8 PEM (RSA, EC P-256/384/521 or Ed25519) whose public half the issuer holds. */
  private_key: Schema.optional(Schema.NonEmptyString),
  /** The `kid` of private_key's public key at the issuer, when it wants one. */
  private_key_id: Schema.optional(Schema.NonEmptyString)
})
export type AdminOidcConfig = typeof AdminOidcConfig.Type

export const GatewayConfig = Schema.Struct({
  server: def(
    Schema.Struct({
      host: def(Schema.NonEmptyString, "127.0.0.1"),
      port: def(Port, 8080),
      tls: Schema.optional(Schema.Struct({ cert: Schema.NonEmptyString, key: Schema.NonEmptyString })),
      /**
       * Behind a proxy: only HTTPS is served (besides the probes), and the X-Forwarded-For and
       * X-Forwarded-Proto of the peers in trusted_proxies are believed; no other peer's.
       */
      trust_proxy: def(Schema.Boolean, false),
      /**
       * With trust_proxy: your proxies' addresses, as IPv4 or IPv6 addresses or CIDR ranges
       * (checked at load). Empty: loopback only (127.0.0.0/8, ::1), a proxy on the same machine;
       * trust_proxy alone never trusts every peer (issue 31).
       */
      trusted_proxies: def(
        Schema.Array(Schema.NonEmptyString.check(Schema.isMaxLength(MAX_TRUSTED_PROXY_CHARS))).check(Schema.isMaxLength(MAX_TRUSTED_PROXIES)),
        []
      ),
      /**
       * With trust_proxy: how many proxies of yours append to `X-Forwarded-For`. The client
       * address is the entry that many places from the right (the one your outermost proxy
       * wrote), or further left past entries that are themselves in trusted_proxies; everything
       * left of it is the client's own text.
       */
      trusted_hops: def(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 16 })), 1),
      shutdown_grace_seconds: def(NonNegativeInt, 15),
      /** A request's headers must be in within this time (slow-header clients are cut off with a 408). */
      headers_timeout_ms: def(PositiveInt, 20_000),
      /** A request's body must be in within this time once its headers are (408). */
      body_timeout_ms: def(PositiveInt, 30_000),
      /** An idle keep-alive connection is closed after this long. */
      keep_alive_timeout_ms: def(PositiveInt, 65_000),
      /**
       * `/readyz` probes the store and Redis at most once per this many milliseconds per gateway;
       * calls in between share the result (unauthenticated probes must not each reach the store).
       */
      readiness_probe_ms: def(Schema.Int.check(Schema.isBetween({ minimum: 10, maximum: 60_000 })), 1_000),
      /** Open connections allowed per client address; 0 = no cap (behind a proxy every client is the proxy). */
      max_connections_per_client: def(NonNegativeInt, 0),
      /**
       * Where spool files go (audit records and credit movements a stop could not write). Default:
       * the SQLite store's directory, else ./data; none for an in-memory store.
       */
      data_dir: Schema.optional(Schema.NonEmptyString)
    }),
    {}
  ),
  store: def(Schema.String.check(Schema.isPattern(/^(sqlite:|postgres:\/\/|postgresql:\/\/)/, {
    message: "expected sqlite:<path> or postgres://..."
  })), "sqlite:./data/modelgate.db"),
  redis: Schema.optional(Schema.String.check(Schema.isPattern(/^rediss?:\/\//, { message: "expected redis://..." }))),
  /**
   * Seals connection DSNs stored through the admin API (services/store/secrets.ts): `key` (or
   * MODELGATE_SECRETS_KEY), at least 16 characters of random text; `previous_keys` during a
   * rotation. Unset: DSNs are stored as given.
   */
  secrets: def(
    Schema.Struct({
      key: Schema.optional(Schema.String.check(Schema.isMinLength(16))),
      previous_keys: def(Schema.Array(Schema.String), [])
    }),
    {}
  ),
  admin: def(
    Schema.Struct({
      // Anyone who holds it administers the gateway: 16 characters at least (a guessable short
      // one was accepted); what the message suggests makes 64.
      token: Schema.optional(Schema.String.check(Schema.isMinLength(16, {
        message: "expected at least 16 characters of random text (make one with: openssl rand -hex 32)"
      }))),
      oidc: Schema.optional(AdminOidcConfig)
    }),
    {}
  ),
  workspace: def(Schema.Struct({ credits: def(DecimalCredits, 1000) }), {}),
  limits: def(
    Schema.Struct({
      requests_per_minute: def(PositiveInt, 50),
      concurrent_streams: def(PositiveInt, 5),
      max_body_bytes: def(PositiveInt, 1_048_576),
      /** Nesting depth of arrays and objects in a JSON body; deeper bodies get a 400 naming the limit. */
      max_json_depth: def(PositiveInt, 64),
      stream_lease_seconds: def(PositiveInt, 30),
      /** Input + output tokens per key (or subject) per minute (issue 33); unset: no limit. */
      tokens_per_minute: Schema.optional(TokensPerMinute)
    }),
    {}
  ),
  /** Credentials other than API keys that clients may present (identity-provider tokens). */
  auth: def(Schema.Struct({ oidc: def(Schema.Array(OidcIssuerConfig), []) }), {}),
  providers: def(Schema.Array(ProviderConfig), []),
  models: def(Schema.Array(ModelConfig), []),
  routing: def(RoutingConfig, {}),
  connections: def(Schema.Array(ConnectionConfig), []),
  mcp: def(
    Schema.Struct({
      session_ttl_seconds: def(PositiveInt, 1800),
      credits_per_tool_call: def(NonNegativeInt, 0),
      max_rows_cap: def(PositiveInt, 10_000),
      timeout_ms_cap: def(PositiveInt, 120_000),
      allowed_origins: def(Schema.Array(Schema.String), []),
      /** sql_run stops fetching once a call's rows hold this many bytes, and sets `truncated`. */
      max_result_bytes: def(PositiveInt, 4_194_304),
      /** Bytes of results all sql_run calls of this process may hold at once; calls wait for room. */
      max_result_bytes_in_flight: def(PositiveInt, 67_108_864),
      /** Statements longer than this (UTF-8 bytes) are refused before any parse. */
      max_statement_bytes: def(PositiveInt, 262_144),
      /** Time the SQL guard may spend on one statement before refusing it as too complex. */
      guard_timeout_ms: def(PositiveInt, 1_000),
      /** Upstream MCP servers served behind /v1/mcp (issue 37); read at start. */
      servers: def(Schema.Array(McpServerConfig).check(Schema.isMaxLength(100)), [])
    }),
    {}
  ),
  credits: def(
    Schema.Struct({
      /** Reservations (decisions section 10): a dead replica's open charges are refunded after this lease. */
      reservation_lease_seconds: def(PositiveInt, 30),
      /** The most credits a replica leases from the pool at once to spend locally (issue 14); smaller near empty. */
      block_size: def(PositiveInt, 200),
      /** What a credit is worth in money, for the spend reports (issue 33); absent: reports in credits only. */
      currency: Schema.optional(CurrencyConfig)
    }),
    {}
  ),
  /**
   * Bounds on the gateway's own store sessions (issue 21), all well under
   * `credits.reservation_lease_seconds`: a replica cut off from Postgres mid-transaction holds
   * the workspace row for at most `idle_in_transaction_ms`, a statement runs at most
   * `statement_ms`, a lock is waited for at most `lock_ms`, a dead idle connection is noticed
   * within `keepalive_seconds` (+10 probes of 1 s), and every store call answers (or fails as
   * an outage, 503) within `call_ms`. Postgres only; SQLite is in-process.
   * Schema migrations at start (issue 31) have bounds of their own, not the request path's: one
   * migration statement runs at most `migration_ms` (Postgres), and a replica waits at most
   * `migration_lock_ms` for another one's migration (both stores).
   * A group commit of credit movements (issue 39) is abandoned and retried after `commit_ms`
   * (Postgres: a frozen store; the paid requests waiting for it answer 503).
   */
  /**
   * The most connections a replica opens to a Postgres store (one pool per process): the
   * replicas' pools together must fit the server's `max_connections`. Credit commits go through
   * one writer per replica, so a pool much smaller than the request concurrency is enough.
   */
  store_pool_size: def(PositiveInt.check(Schema.isLessThanOrEqualTo(1_000)), 20),
  store_timeouts: def(
    Schema.Struct({
      statement_ms: def(PositiveInt, 5_000),
      lock_ms: def(PositiveInt, 2_000),
      idle_in_transaction_ms: def(PositiveInt, 2_000),
      keepalive_seconds: def(PositiveInt, 5),
      call_ms: def(PositiveInt, 6_000),
      commit_ms: def(PositiveInt, 2_000),
      migration_ms: def(PositiveInt, 900_000),
      /** One spend report's query (GET /usage, issue 33): it reads a window of the whole audit trail, off the request path. */
      report_ms: def(PositiveInt, 60_000),
      migration_lock_ms: def(PositiveInt, 1_800_000)
    }),
    {}
  ),
  /**
   * Redis calls' bounds (with `redis`): a call that gets no reply within `command_ms` answers its
   * request 503 (fail closed, never unlimited); a start waits `connect_ms` for a first connection
   * before serving anyway (the calls then fail until Redis answers).
   */
  redis_timeouts: def(
    Schema.Struct({
      command_ms: def(PositiveInt, 1_000),
      connect_ms: def(PositiveInt, 1_000)
    }),
    {}
  ),
  /**
   * Budget and pool alerts (issue 33): when the pool or a key's or team's budget crosses one of
   * `thresholds` (shares of its limit) within a period, one JSON POST to `webhook_url`, retried
   * with backoff until the receiver answers 2xx, sent once across every replica. Unset URL: none.
   */
  alerts: def(
    Schema.Struct({
      /** https, or http on a loopback host (checked at load). */
      webhook_url: Schema.optional(Schema.NonEmptyString.check(Schema.isMaxLength(2048))),
      thresholds: def(
        Schema.Array(Schema.Finite.check(Schema.isGreaterThan(0), Schema.isLessThanOrEqualTo(1)))
          .check(Schema.isMinLength(1), Schema.isMaxLength(10)),
        [0.8, 1]
      ),
      /** Extra request headers for the receiver (its token, say). */
      headers: def(
        Schema.Record(
          Schema.String.check(Schema.isPattern(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { message: "expected an HTTP header name" })),
          Schema.String.check(Schema.isPattern(/^[^\r\n]*$/, { message: "a header value cannot contain a line break" }))
        ),
        {}
      ),
      /** Deadline of one delivery attempt, from connect to the receiver's status. */
      attempt_timeout_ms: def(Schema.Int.check(Schema.isBetween({ minimum: 100, maximum: 120_000 })), 10_000),
      /** First wait after a failed attempt; doubled each time (with jitter) up to max_backoff_ms. */
      backoff_ms: def(Schema.Int.check(Schema.isBetween({ minimum: 10, maximum: 600_000 })), 1_000),
      max_backoff_ms: def(Schema.Int.check(Schema.isBetween({ minimum: 10, maximum: 3_600_000 })), 300_000),
      /** A replica that stops renewing its claim on an alert for this long leaves it to another. */
      lease_seconds: def(Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 3600 })), 60)
    }),
    {}
  ),
  /** `POST /v1/messages/count_tokens`: free unless an operator prices it. */
  count_tokens: def(Schema.Struct({ credits: def(NonNegativeInt, 0) }), {}),
  /**
   * Stored Responses (`POST /v1/responses` with `store` not false): the conversation text, kept
   * for `previous_response_id`, `item_reference` and `GET/DELETE /v1/responses/{id}`. `store:
   * false` keeps nothing and refuses references by name.
   */
  responses: def(
    Schema.Struct({
      store: def(Schema.Boolean, true),
      retention_days: def(PositiveInt, 30),
      /** A response whose input and output items exceed this (JSON bytes) is answered but not kept (`store: false` in it). */
      max_stored_bytes: def(PositiveInt, 4_194_304),
      /**
       * The most stored text one `previous_response_id` may bring back (its whole chain): a longer
       * conversation is refused by name rather than read into the request.
       */
      max_conversation_bytes: def(PositiveInt, 33_554_432)
    }),
    {}
  ),
  /**
   * `POST /v1/moderations`: forwarded to this OpenAI-kind provider (unset: the endpoint answers
   * 404 not_found naming this setting), at this price per request.
   */
  moderations: def(
    Schema.Struct({
      provider: Schema.optional(Schema.NonEmptyString),
      credits: def(NonNegativeInt, 0)
    }),
    {}
  ),
  audit: def(
    Schema.Struct({
      flush_interval_ms: def(PositiveInt, 200),
      batch_size: def(PositiveInt, 500)
    }),
    {}
  ),
  log: def(
    Schema.Struct({
      level: def(Schema.Literals(["debug", "info", "warn", "error", "none"]), "info"),
      /** `pretty` for a terminal; `json` (one object a line) for a log collector. */
      format: def(Schema.Literals(["pretty", "json"]), "pretty")
    }),
    {}
  ),
  telemetry: def(
    Schema.Struct({
      /** When set, `GET /metrics` wants `Authorization: Bearer <token>`; unset, it is open like /healthz. */
      metrics_token: Schema.optional(Schema.String.check(Schema.isMinLength(8))),
      /**
       * The collector's OTLP/HTTP base URL (`http://otel-collector:4318`); `/v1/traces` is appended
       * unless the URL already ends with it. Unset: no tracing, and nothing of it is loaded.
       */
      otlp_endpoint: Schema.optional(Schema.String.check(Schema.isPattern(/^https?:\/\/[^\s]+$/, {
        message: "expected http://... or https://..."
      }))),
      /**
       * `http/json` (the default: Effect encodes a span as OTLP/JSON about 13 times faster than as
       * protobuf, measured 3 µs against 42) or `http/protobuf` for a receiver that takes only that.
       */
      otlp_protocol: def(Schema.Literals(["http/json", "http/protobuf"]), "http/json"),
      /** Extra request headers for the collector (a vendor's API key, say). */
      otlp_headers: def(
        Schema.Record(
          Schema.String.check(Schema.isPattern(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { message: "expected an HTTP header name" })),
          Schema.String.check(Schema.isPattern(/^[^\r\n]*$/, { message: "a header value cannot contain a line break" }))
        ),
        {}
      ),
      /** `service.name` of the exported spans: one name for every replica of a deployment. */
      service_name: def(Schema.NonEmptyString, "modelgate"),
      /**
       * Share of requests traced when the client sent no `traceparent`; a client's own sampling
       * decision (its traceparent's sampled flag) is followed as it is.
       */
      sample_ratio: def(Schema.Finite.check(Schema.isBetween({ minimum: 0, maximum: 1 })), 1),
      /** Spans are sent in batches at least this often (and whenever 512 are waiting). */
      export_interval_ms: def(PositiveInt, 5_000)
    }),
    {}
  )
})
export type GatewayConfig = typeof GatewayConfig.Type

/**
 * Every key that can appear in the file, as a tree: MODELGATE_* names are split on "_" and
 * matched greedily against it, because keys themselves contain underscores. Derived from the
 * schema, so a key added there is overridable at once (a hand-written tree drifted before).
 */
type KeyNode = KeyTree | "scalar" | { readonly items: KeyNode }
type KeyTree = { readonly [key: string]: KeyNode }

const keyNodeOf = (ast: SchemaAST.AST): KeyNode => {
  switch (ast._tag) {
    case "Objects":
      return Object.fromEntries(ast.propertySignatures.map((p) => [String(p.name), keyNodeOf(p.type)]))
    case "Arrays":
      return ast.rest.length > 0 ? { items: keyNodeOf(ast.rest[0]!) } : "scalar"
    case "Union": {
      // An optional section is a union with undefined: its structure is the member that has one.
      const structured = ast.types.filter((member) => member._tag === "Objects" || member._tag === "Arrays")
      return structured.length === 1 ? keyNodeOf(structured[0]!) : "scalar"
    }
    default:
      return "scalar"
  }
}

export const keyTree = keyNodeOf(GatewayConfig.ast) as KeyTree
export type { KeyNode, KeyTree }

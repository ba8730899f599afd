/** Config of the bedrock kind: the contract, its rules named by field, and the AWS_* automatic provider. */
import { describe, expect, it } from "@effect/vitest"
import { Result } from "effect"
import { resolveConfig } from "../../../src/services/config/load.ts"
import { bedrockBaseUrl } from "../../../src/services/config/bedrock.ts"
import { compilePattern, matchesPattern } from "../../../src/services/catalog/patterns.ts"
import type { GatewayConfig } from "../../../src/services/config/schema.ts"

/** The routes of `config` that serve `name`. */
const routesFor = (config: GatewayConfig, name: string) =>
  config.models.filter((m) => m.match !== undefined && matchesPattern(compilePattern(m.match), name))

const load = (fileText: string | undefined, env: Record<string, string> = {}) => resolveConfig({ fileText, fileName: "modelgate.yaml", env })
const errorOf = (result: ReturnType<typeof load>) => (Result.isFailure(result) ? result.failure.message : "no error")
const AWS = { AWS_ACCESS_KEY_ID: "AKIAEXAMPLE000000000", AWS_SECRET_ACCESS_KEY: "secret" }

describe("bedrock config", () => {
  it("takes the issue's contract: region, credentials by variable, base URL from the region", () => {
    const config = Result.getOrThrow(load(`
providers:
  - { name: br, kind: bedrock, region: us-east-1, access_key_id_env: AWS_ACCESS_KEY_ID, secret_access_key_env: AWS_SECRET_ACCESS_KEY }
models:
  - { alias: claude, id: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", provider: br }
`, AWS))
    const provider = config.providers.find((p) => p.name === "br")!
    expect(provider).toMatchObject({ kind: "bedrock", region: "us-east-1", access_key_id_env: "AWS_ACCESS_KEY_ID" })
    expect(bedrockBaseUrl(provider)).toBe("https://bedrock-runtime.us-east-1.amazonaws.com")
    expect(bedrockBaseUrl({ ...provider, base_url: "https://vpce-1.bedrock-runtime.us-east-1.vpce.amazonaws.com/" })).toBe(
      "https://vpce-1.bedrock-runtime.us-east-1.vpce.amazonaws.com"
    )
  })

  it.each([
    ["providers:\n  - { name: br, kind: bedrock, access_key_id: a, secret_access_key: b }", "providers.0.region: required for kind bedrock"],
    ["providers:\n  - { name: br, kind: bedrock, region: mars-1, access_key_id: a, secret_access_key: b }", 'providers.0.region: "mars-1" is not an AWS region name'],
    ["providers:\n  - { name: br, kind: bedrock, region: us-east-1, secret_access_key: b }", "providers.0.access_key_id: required for kind bedrock"],
    ["providers:\n  - { name: br, kind: bedrock, region: us-east-1, access_key_id: a, secret_access_key: b, secret_access_key_env: X }", "providers.0.secret_access_key_env: give secret_access_key or secret_access_key_env, not both"],
    ["providers:\n  - { name: br, kind: bedrock, region: us-east-1, access_key_id: a, secret_access_key_env: NOT_SET }", "providers.0.secret_access_key_env: the variable NOT_SET is not set"],
    ["providers:\n  - { name: br, kind: bedrock, region: us-east-1, access_key_id: a, secret_access_key: b, api_key: k }", "providers.0.api_key: kind bedrock signs with AWS credentials"],
    ["providers:\n  - { name: o, kind: openai, base_url: 'https://x', region: us-east-1 }", "providers.0.region: only for kind bedrock"]
  ])("refuses %#, naming the field", (file, message) => {
    expect(errorOf(load(file))).toContain(message)
  })

  it("AWS_* variables bring a bedrock provider with routes for Bedrock's model ids", () => {
    const config = Result.getOrThrow(load(undefined, { ...AWS, AWS_SESSION_TOKEN: "token", AWS_DEFAULT_REGION: "eu-west-3" }))
    const provider = config.providers.find((p) => p.name === "bedrock")!
    expect(provider).toMatchObject({
      kind: "bedrock",
      region: "eu-west-3",
      access_key_id_env: "AWS_ACCESS_KEY_ID",
      secret_access_key_env: "AWS_SECRET_ACCESS_KEY",
      session_token_env: "AWS_SESSION_TOKEN"
    })
    const served = (name: string) => routesFor(config, name).map((m) => m.provider)
    for (const id of ["anthropic.claude-3-5-haiku-20241022-v1:0", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "global.anthropic.claude-opus-4-5-20251101-v1:0", "amazon.nova-pro-v1:0", "us.meta.llama3-3-70b-instruct-v1:0"]) {
      expect(served(id), id).toEqual(["bedrock"])
    }
    expect(routesFor(config, "amazon.titan-embed-text-v2:0").map((m) => m.endpoints)).toEqual([["embeddings"]])
    // AWS_REGION wins over AWS_DEFAULT_REGION; without a region or a secret there is no provider.
    expect(Result.getOrThrow(load(undefined, { ...AWS, AWS_REGION: "us-west-2", AWS_DEFAULT_REGION: "eu-west-3" })).providers.find((p) => p.name === "bedrock")?.region).toBe("us-west-2")
    expect(Result.getOrThrow(load(undefined, AWS)).providers.map((p) => p.name)).toEqual(["echo"])
    expect(Result.getOrThrow(load(undefined, { AWS_ACCESS_KEY_ID: "a", AWS_REGION: "us-east-1" })).providers.map((p) => p.name)).toEqual(["echo"])
  })
})

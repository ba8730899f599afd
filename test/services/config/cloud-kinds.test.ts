/** Config of the azure, gemini and vertex kinds: the contract, their rules named by field, the automatic providers; and redaction of Google's secrets. */
import { describe, expect, it } from "@effect/vitest"
import { Result } from "effect"
import { geminiBaseUrl, vertexBaseUrl } from "../../../src/services/config/cloud-kinds.ts"
import { resolveConfig } from "../../../src/services/config/load.ts"
import { makeRedactor } from "../../../src/services/providers/redact.ts"

const load = (fileText: string | undefined, env: Record<string, string> = {}) => resolveConfig({ fileText, fileName: "modelgate.yaml", env })
const errorOf = (result: ReturnType<typeof load>) => (Result.isFailure(result) ? result.failure.message : "no error")
const ENV = { GEMINI_API_KEY: "g-key", AZURE_OPENAI_API_KEY: "a-key" }

describe("azure, gemini and vertex config", () => {
  it("takes the issue's contract; Gemini's and Vertex's base URLs default to Google's", () => {
    const config = Result.getOrThrow(load(`
providers:
  - { name: gem, kind: gemini, base_url: https://generativelanguage.googleapis.com, api_key_env: GEMINI_API_KEY }
  - { name: az, kind: azure, base_url: https://res.openai.azure.com, api_key_env: AZURE_OPENAI_API_KEY, api_version: "2025-04-01-preview" }
  - { name: vx, kind: vertex, project: my-project, location: us-east5, credentials_file: /etc/modelgate/sa.json }
  - { name: gem2, kind: gemini, api_key: literal-key }
  - { name: vxg, kind: vertex, project: my-project, location: global, credentials_file: /sa.json }
models:
  - { alias: flash, id: gemini-2.5-flash, provider: gem }
`, ENV))
    const byName = (name: string) => config.providers.find((p) => p.name === name)!
    expect(byName("az")).toMatchObject({ kind: "azure", api_version: "2025-04-01-preview" })
    expect(byName("vx")).toMatchObject({ kind: "vertex", project: "my-project", location: "us-east5", credentials_file: "/etc/modelgate/sa.json" })
    expect(geminiBaseUrl(byName("gem2"))).toBe("https://generativelanguage.googleapis.com")
    expect(vertexBaseUrl(byName("vx"))).toBe("https://us-east5-aiplatform.googleapis.com")
    expect(vertexBaseUrl(byName("vxg"))).toBe("https://aiplatform.googleapis.com")
  })

  it("names the field of each mistake", () => {
    const cases: Array<[string, string]> = [
      ["{ name: az, kind: azure, base_url: https://r.openai.azure.com, api_key: k }", "providers.0.api_version: required for kind azure"],
      ["{ name: az, kind: azure, api_key: k, api_version: v }", "providers.0.base_url: required for kind azure"],
      ["{ name: az, kind: azure, base_url: https://r.openai.azure.com, api_version: v }", "providers.0.api_key: required for kind azure"],
      ["{ name: az, kind: azure, base_url: https://r.openai.azure.com, api_version: v, api_key_env: NOPE }", "providers.0.api_key_env: the variable NOPE is not set"],
      ["{ name: g, kind: gemini }", "providers.0.api_key: required for kind gemini"],
      ["{ name: o, kind: openai, base_url: https://x, api_version: v }", "providers.0.api_version: only for kind azure"],
      ["{ name: v, kind: vertex, location: us-east5, credentials_file: /f }", "providers.0.project: required for kind vertex"],
      ["{ name: v, kind: vertex, project: my-project, credentials_file: /f }", "providers.0.location: required for kind vertex"],
      ["{ name: v, kind: vertex, project: my-project, location: Mars, credentials_file: /f }", "providers.0.location: \"Mars\" is not a Google Cloud location"],
      ["{ name: v, kind: vertex, project: my-project, location: us-east5 }", "providers.0.credentials_file: required for kind vertex"],
      ["{ name: v, kind: vertex, project: my-project, location: us-east5, credentials_file: /f, api_key: k }", "providers.0.api_key: kind vertex authenticates with a service account"]
    ]
    for (const [entry, message] of cases) expect(errorOf(load(`providers:\n  - ${entry}\n`, ENV))).toContain(message)
  })

  it("brings the automatic providers from the vendors' variables", () => {
    const config = Result.getOrThrow(load(undefined, {
      GEMINI_API_KEY: "g",
      AZURE_OPENAI_API_KEY: "a",
      AZURE_OPENAI_ENDPOINT: "https://res.openai.azure.com",
      GOOGLE_APPLICATION_CREDENTIALS: "/sa.json",
      GOOGLE_CLOUD_PROJECT: "my-project",
      CLOUD_ML_REGION: "us-east5"
    }))
    const kinds = Object.fromEntries(config.providers.map((p) => [p.name, p]))
    expect(kinds.gemini).toMatchObject({ kind: "gemini", api_key_env: "GEMINI_API_KEY" })
    expect(kinds.azure).toMatchObject({ kind: "azure", base_url: "https://res.openai.azure.com", api_version: "2025-04-01-preview" })
    expect(kinds.vertex).toMatchObject({ kind: "vertex", project: "my-project", location: "us-east5", credentials_file: "/sa.json" })
    expect(config.models.some((m) => m.match === "gemini-*" && m.provider === "gemini")).toBe(true)
    expect(config.models.some((m) => m.match === "claude-*" && m.provider === "vertex")).toBe(true)
    expect(Result.getOrThrow(load(undefined, { GOOGLE_APPLICATION_CREDENTIALS: "/sa.json" })).providers.some((p) => p.kind === "vertex")).toBe(false)
  })
})

describe("redaction of Google's secrets", () => {
  it("removes API keys, access tokens and private keys from relayed text", () => {
    const redact = makeRedactor([])
    expect(redact("key AIzaSyD-0123456789abcdefghijklmnopqrstu rejected")).toBe("key [redacted] rejected")
    expect(redact("token ya29.a0AfB_byC-xyz.123 expired")).toBe("token [redacted] expired")
    expect(redact("bad -----BEGIN PRIVATE KEY-----\nMIIEv\n-----END PRIVATE KEY----- here")).toBe("bad [redacted] here")
  })
})

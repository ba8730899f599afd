/** GET /openapi.json: the admin API described from the schemas the handlers decode with, every route of it. */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Ajv2020 } from "ajv/dist/2020.js"
import { adminRoutes } from "../../src/http/routes/admin.ts"
import { makeAdminAuth } from "../../src/http/routes/admin-auth.ts"
import { adminReloadRoutes } from "../../src/http/routes/admin-reload.ts"
import { adminSubjectRoutes } from "../../src/http/routes/admin-subjects.ts"
import { adminTeamRoutes } from "../../src/http/routes/admin-teams.ts"
import { DESCRIBED_ROUTES } from "../../src/http/routes/openapi.ts"
import { startGateway, type TestGateway } from "../support/gateway.ts"

describe("GET /openapi.json", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  it("is public OpenAPI 3.1 whose operations all want the admin token", async () => {
    const response = await fetch(`${gw.url}/openapi.json`)
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toContain("application/json")
    const document: any = await response.json()
    expect(document.openapi).toMatch(/^3\.1\./)
    expect(document.security).toEqual([{ bearerAuth: [] }])
    expect(document.components.securitySchemes.bearerAuth).toEqual({ type: "http", scheme: "bearer" })
    expect(Object.keys(document.paths["/connections/{connection_id}"]).sort()).toEqual(["delete", "patch"])
  })

  it("describes every admin route, and nothing the router does not serve", () => {
    const auth = makeAdminAuth({ token: "t".repeat(32), secure: false })
    const served = [...adminRoutes({ auth }), ...adminSubjectRoutes({ auth }), ...adminTeamRoutes({ auth }), ...adminReloadRoutes({ auth })]
      .map((r) => `${r.method} ${r.path}`)
    expect([...DESCRIBED_ROUTES].sort()).toEqual([...served].sort())
  })

  it("compiles the bodies from the handlers' schemas: what the document refuses, the API refuses", async () => {
    const document: any = await (await fetch(`${gw.url}/openapi.json`)).json()
    const ajv = new Ajv2020({ strict: false })
    for (const [name, schema] of Object.entries(document.components.schemas)) ajv.addSchema(schema as object, `#/components/schemas/${name}`)
    const createKey = ajv.compile(document.paths["/api-keys"].post.requestBody.content["application/json"].schema)
    expect(createKey({ name: "ok", budget: { max_requests: 5 } })).toBe(true)
    expect(createKey({ name: "bad", budget: { max_requests: -3 } })).toBe(false)
    expect((await gw.admin("POST", "/api-keys", { name: "bad", budget: { max_requests: -3 } })).status).toBe(400)
    const patchConnection = ajv.compile(document.paths["/connections/{connection_id}"].patch.requestBody.content["application/json"].schema)
    expect(patchConnection({ url: "postgres://u:p@h/db" })).toBe(true)
    expect(patchConnection({ name: "" })).toBe(false)
    // Unknown fields: the API refuses them, so the document does too.
    expect(patchConnection({ id: 3 })).toBe(false)
    expect((await gw.admin("PATCH", "/connections/1", { id: 3 })).status).toBe(400)
    const audit = document.paths["/audit"].get.parameters.map((p: { name: string }) => p.name)
    expect(audit).toEqual(expect.arrayContaining(["key_id", "include", "exclude", "writes_only", "target_kind", "target_id"]))
  })
})

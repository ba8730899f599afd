/**
 * No generator function made per request (issue 38, round 8; README, Layers): a `function*`
 * expression inside a function that is not itself a generator is a new closure each time that
 * function runs, and V8 builds each new generator closure a map and a prototype at its first
 * call (about 1 µs, and garbage in old space). Eight of them ran on every free request and cost
 * about a fifth of its CPU. In the files a model request runs through, every such site is listed
 * here with why it does not run per request; a new one fails this test. Write it as
 * `Effect.fnUntraced(function*(...) {...})` at module level or in the layer's build, as
 * `Effect.gen(() => steps(...))` with a `function* steps` declared once, or chained with
 * `Effect.flatMap`; list it here only if it runs once (a layer, a factory) or off the request path.
 * Not seen: a `function*` inside another generator's body, made whenever that body runs; most such
 * sites are in layer builds, which run once. The complete check is the runtime count:
 * `node bench/generators.ts [model]`.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import ts from "typescript"
import { describe, expect, it } from "vitest"

const src = resolve(import.meta.dirname, "..", "src")

/** The files and folders a model request runs through (src-relative). */
const REQUEST_PATH = [
  "pipelines/",
  "http/app.ts",
  "http/body.ts",
  "http/router.ts",
  "wire/",
  "services/audit/",
  "services/auth/",
  "services/catalog/",
  "services/credits/",
  "services/durability/",
  "services/limits/",
  "services/metrics/",
  "services/providers/",
  "services/responses/",
  "services/routing/",
  "services/tokens/",
  "services/store/AuditRepo.ts",
  "services/store/CreditsRepo.ts",
  "services/store/credit-batches.ts",
  "services/store/KeysRepo.ts",
  "services/store/ResponsesRepo.ts"
]

/** `file > the function the generator is written in`, and why it does not run per request. */
const ALLOWED: Record<string, string> = {
  "http/app.ts > makeHttpApp": "builds the app once",
  "pipelines/model/pipeline.ts > modelPipeline": "builds a route's handler once",
  "pipelines/admission.ts > repriceCharge": "only when a fallback of another price answers",
  "pipelines/model/route.ts > (argument of Stream.catch)": "only when a stream fails",
  "services/audit/Audit.ts > makeLayer": "a layer",
  "services/audit/Audit.ts > (argument of Effect.addFinalizer)": "at shutdown",
  "services/auth/KeyCache.ts > makeLayer": "a layer",
  "services/credits/BlockWriter.ts > makeBlockWriter": "once per replica",
  "services/credits/BlockWriter.ts > (argument of Effect.addFinalizer)": "at shutdown",
  "services/credits/Credits.ts > layer": "a layer",
  "services/limits/AdminThrottle.ts > makeMemory": "a layer",
  "services/limits/AdminThrottle.ts > layerRedis": "a layer",
  "services/limits/RedisClient.ts > probe": "when Redis is suspected down",
  "services/limits/StreamSlots.ts > layerRedis": "a layer",
  "services/providers/Providers.ts > layer": "a layer",
  "services/routing/Router.ts > makeRouter": "a layer",
  "services/store/CreditsRepo.ts > reserved": "only with another SQLite transaction open",
  "services/store/CreditsRepo.ts > ensureWorkspace": "at start",
  "services/store/CreditsRepo.ts > budgetUsage": "admin: the key and team lists",
  "services/store/CreditsRepo.ts > addCredits": "top-ups",
  "services/store/CreditsRepo.ts > refundReservation": "the orphan sweep",
  "services/store/CreditsRepo.ts > postgresBatchTx": "once per store",
  "services/store/KeysRepo.ts > insertKeys": "admin: key creation",
  "services/store/KeysRepo.ts > updateKey": "admin: key changes",
  "services/store/KeysRepo.ts > deleteKey": "admin: key deletion",
  "services/store/ResponsesRepo.ts > (argument of Effect.addFinalizer)": "at shutdown",
  "services/store/ResponsesRepo.ts > insertSqlite": "only a response with more items than one batch",
  "services/store/ResponsesRepo.ts > remove": "DELETE /v1/responses/{id}"
}

const files = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? files(join(dir, entry.name)) : entry.name.endsWith(".ts") ? [join(dir, entry.name)] : []
  )

const isFunction = (node: ts.Node): node is ts.FunctionLikeDeclaration =>
  ts.isArrowFunction(node) || ts.isFunctionExpression(node) || ts.isFunctionDeclaration(node) || ts.isMethodDeclaration(node) ||
  ts.isConstructorDeclaration(node) || ts.isGetAccessorDeclaration(node) || ts.isSetAccessorDeclaration(node)

/** What to call the function a generator is written in: its variable, property or declaration name. */
const ownerName = (owner: ts.FunctionLikeDeclaration, file: ts.SourceFile): string => {
  const parent = owner.parent
  if (ts.isVariableDeclaration(parent) && ts.isIdentifier(parent.name)) return parent.name.text
  if ((ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) && parent.name !== undefined) return parent.name.getText(file)
  if ((ts.isFunctionDeclaration(owner) || ts.isMethodDeclaration(owner)) && owner.name !== undefined) return owner.name.getText(file)
  if (ts.isCallExpression(parent)) return `(argument of ${parent.expression.getText(file)})`
  return "(anonymous)"
}

/** Every `function*` expression written inside a function that is not a generator itself. */
const madePerCall = (path: string): Array<string> => {
  const file = ts.createSourceFile(path, readFileSync(path, "utf8"), ts.ScriptTarget.Latest, true)
  const found: Array<string> = []
  const visit = (node: ts.Node) => {
    if (ts.isFunctionExpression(node) && node.asteriskToken !== undefined) {
      let owner: ts.Node | undefined = node.parent
      while (owner !== undefined && !isFunction(owner)) owner = owner.parent
      if (owner !== undefined && (owner as ts.FunctionLikeDeclaration).asteriskToken === undefined) {
        found.push(`${relative(src, path)} > ${ownerName(owner as ts.FunctionLikeDeclaration, file)}`)
      }
    }
    ts.forEachChild(node, visit)
  }
  visit(file)
  return found
}

describe("the request path", () => {
  const sites = files(src)
    .filter((path) => REQUEST_PATH.some((prefix) => relative(src, path).startsWith(prefix)))
    .flatMap(madePerCall)

  it("makes no generator function per call, but where listed", () => {
    expect(sites.filter((site) => ALLOWED[site] === undefined)).toEqual([])
  })

  it("lists only sites that exist", () => {
    expect(Object.keys(ALLOWED).filter((site) => !sites.includes(site))).toEqual([])
  })

  it("finds the pattern it forbids", () => {
    const probe = join(import.meta.dirname, "fixtures", "generator-per-call.ts")
    expect(madePerCall(probe).map((site) => site.split(" > ")[1])).toEqual(["perCall", "method"])
  })
})

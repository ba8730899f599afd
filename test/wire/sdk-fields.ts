/**
 * Request field paths, read two ways so a test can compare them:
 * - from the official SDKs' type definitions (the TypeScript compiler resolves the request
 *   params type of the installed `openai` / `@anthropic-ai/sdk` and walks it), and
 * - from the gateway's own request schemas (Effect's schema AST).
 *
 * A path names a field by where it sits: `messages[].content[]{type=image_url}.image_url.detail`.
 * `[]` steps into an array; `{type=x}` (or `{role=x}`) picks the member of a union of objects told
 * apart by that literal field, so each content block, message role and tool kind has its own
 * fields. Other unions, `null` and `undefined` are transparent. An object with an index
 * signature (JSON Schema documents, tool inputs, metadata) accepts any key, so nothing below it
 * is listed: the path ends in `.*`.
 */
import { existsSync } from "node:fs"
import { createRequire } from "node:module"
import * as path from "node:path"
import { SchemaAST } from "effect"
import ts from "typescript"

const require = createRequire(import.meta.url)

/** The discriminating fields, in order of preference. */
const discriminators = ["type", "role"] as const

// --- the SDK side ----------------------------------------------------------------------------

/** The installed package's directory (its `exports` hide package.json, so walk up from the entry). */
const packageRoot = (packageName: string): string => {
  let dir = path.dirname(require.resolve(packageName))
  while (!existsSync(path.join(dir, "package.json")) || path.basename(dir) !== path.basename(packageName)) {
    const parent = path.dirname(dir)
    if (parent === dir) throw new Error(`cannot find the ${packageName} package`)
    dir = parent
  }
  return dir
}

const declarationFile = (packageName: string, subpath: string): string => path.join(packageRoot(packageName), subpath)

const compilerOptions: ts.CompilerOptions = {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  types: [],
  // No DOM: the SDKs need only the language lib, and the DOM declarations double the work.
  lib: ["lib.es2022.d.ts"],
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext
}

let shared: ts.Program | undefined

/**
 * One program for every declaration file asked for: each new file extends the previous program,
 * which reuses what it already parsed (the SDKs share most of their files).
 */
/** Parses several declaration files in one program, cheaper than one program after the other. */
export const preloadSdkDeclarations = (entries: ReadonlyArray<readonly [packageName: string, subpath: string]>): void => {
  const files = entries.map(([packageName, subpath]) => declarationFile(packageName, subpath))
  shared = ts.createProgram([...(shared?.getRootFileNames() ?? []), ...files], compilerOptions, undefined, shared)
}

const programWith = (file: string): ts.Program => {
  if (shared?.getSourceFile(file) !== undefined) return shared
  const roots = [...(shared?.getRootFileNames() ?? []), file]
  shared = ts.createProgram(roots, compilerOptions, undefined, shared)
  return shared
}

/**
 * Every field path of `typeName` (exported from `subpath` of `packageName`, a `.d.ts` file), to
 * `maxDepth` nested objects.
 */
export const sdkFieldPaths = (
  packageName: string,
  subpath: string,
  typeName: string,
  maxDepth = 12
): Set<string> => {
  const file = declarationFile(packageName, subpath)
  const program = programWith(file)
  const checker = program.getTypeChecker()
  const source = program.getSourceFile(file)
  if (source === undefined) throw new Error(`cannot read ${file}`)
  const moduleSymbol = checker.getSymbolAtLocation(source)
  const exported = moduleSymbol === undefined ? undefined : checker.getExportsOfModule(moduleSymbol).find((s) => s.name === typeName)
  if (exported === undefined) throw new Error(`${typeName} is not exported by ${file}`)
  const root = checker.getDeclaredTypeOfSymbol(exported)
  const out = new Set<string>()

  const literalValues = (type: ts.Type): Array<string> | undefined => {
    const members = type.isUnion() ? type.types : [type]
    const values: Array<string> = []
    for (const member of members) {
      if (member.isStringLiteral()) values.push(member.value)
      else if (!(member.flags & (ts.TypeFlags.Null | ts.TypeFlags.Undefined))) return undefined
    }
    return values.length > 0 ? values : undefined
  }

  const isObjectLike = (type: ts.Type): boolean =>
    (type.flags & ts.TypeFlags.Object) !== 0 && !checker.isArrayType(type) && !checker.isTupleType(type)

  const walk = (type: ts.Type, at: string, depth: number, seen: ReadonlySet<ts.Type>): void => {
    if (depth > maxDepth) return
    if (type.isUnion() || type.isIntersection()) {
      for (const member of type.types) walk(member, at, depth, seen)
      return
    }
    if (checker.isArrayType(type) || checker.isTupleType(type)) {
      for (const element of checker.getTypeArguments(type as ts.TypeReference)) walk(element, `${at}[]`, depth, seen)
      return
    }
    if (!isObjectLike(type) || seen.has(type)) return
    const nextSeen = new Set(seen).add(type)
    const properties = checker.getPropertiesOfType(type)
    // Functions and classes (`Uploadable` bodies) are not JSON objects.
    if (type.getCallSignatures().length > 0) return
    let labels = [at]
    for (const key of discriminators) {
      const property = properties.find((p) => p.name === key)
      if (property === undefined) continue
      const values = literalValues(checker.getTypeOfSymbol(property))
      if (values !== undefined) {
        labels = values.map((value) => `${at}{${key}=${value}}`)
        break
      }
    }
    for (const label of labels) {
      if (checker.getIndexInfosOfType(type).length > 0) {
        out.add(`${label}.*`)
        continue
      }
      for (const property of properties) {
        const fieldPath = `${label}.${property.name}`.replace(/^\./, "")
        out.add(fieldPath)
        walk(checker.getTypeOfSymbol(property), fieldPath, depth + 1, nextSeen)
      }
    }
  }

  walk(root, "", 0, new Set())
  return out
}

// --- the gateway side ------------------------------------------------------------------------

/** Every field path a request schema accepts, in the same notation. */
export const schemaFieldPaths = (ast: SchemaAST.AST, maxDepth = 12): Set<string> => {
  const out = new Set<string>()
  const literalValues = (node: SchemaAST.AST): Array<string> | undefined => {
    const members = node._tag === "Union" ? node.types : [node]
    const values: Array<string> = []
    for (const member of members) {
      if (member._tag === "Literal" && typeof member.literal === "string") values.push(member.literal)
      else if (member._tag !== "Null" && member._tag !== "Undefined") return undefined
    }
    return values.length > 0 ? values : undefined
  }
  const walk = (node: SchemaAST.AST, at: string, depth: number, seen: ReadonlySet<SchemaAST.AST>): void => {
    if (depth > maxDepth || seen.has(node)) return
    const nextSeen = new Set(seen).add(node)
    switch (node._tag) {
      case "Suspend":
        return walk(node.thunk(), at, depth, nextSeen)
      case "Union":
        for (const member of node.types) walk(member, at, depth, nextSeen)
        return
      case "Arrays":
        for (const element of [...node.elements, ...node.rest]) walk(element, `${at}[]`, depth, nextSeen)
        return
      case "Objects": {
        let labels = [at]
        for (const key of discriminators) {
          const property = node.propertySignatures.find((p) => p.name === key)
          const values = property === undefined ? undefined : literalValues(property.type)
          if (values !== undefined) {
            labels = values.map((value) => `${at}{${key}=${value}}`)
            break
          }
        }
        for (const label of labels) {
          if (node.indexSignatures.length > 0) {
            out.add(`${label}.*`)
            continue
          }
          for (const property of node.propertySignatures) {
            const fieldPath = `${label}.${String(property.name)}`.replace(/^\./, "")
            out.add(fieldPath)
            walk(property.type, fieldPath, depth + 1, nextSeen)
          }
        }
        return
      }
      case "Unknown":
      case "Any":
        out.add(`${at}.*`)
        return
      default:
        return
    }
  }
  walk(ast, "", 0, new Set())
  return out
}

/**
 * The SDK paths the schema does not accept. A path is covered when the schema lists it, or when
 * the schema accepts anything at one of its ancestors (`a.*` covers `a.b.c`, `a{type=x}.*` covers
 * `a{type=x}.b`).
 */
export const uncovered = (sdk: ReadonlySet<string>, schema: ReadonlySet<string>): Array<string> => {
  const open = [...schema].filter((p) => p.endsWith(".*")).map((p) => p.slice(0, -2))
  const coveredByOpen = (p: string) => open.some((prefix) => p.startsWith(`${prefix}.`) || p.startsWith(`${prefix}[]`) || p.startsWith(`${prefix}{`))
  return [...sdk].filter((p) => !schema.has(p) && !coveredByOpen(p)).sort()
}

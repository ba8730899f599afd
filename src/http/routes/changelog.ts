/**
 * `GET /changelog`: the CHANGELOG.md this build ships, as text/markdown, unauthenticated like
 * /openapi.json (it names releases and changes, never data). It is the target of the `Link`
 * that a deprecated field or route answers with (src/domain/deprecation.ts), so the link works
 * on any host the gateway runs on. Read once, on the first request, and kept.
 */
import { Effect } from "effect"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { readFileSync } from "node:fs"
import { CHANGELOG_PATH } from "../../domain/deprecation.ts"
import { NotFound } from "../../domain/errors.ts"
import { route } from "../router.ts"

const CHANGELOG_FILE = new URL("../../../CHANGELOG.md", import.meta.url)

let text: string | null | undefined
const changelogText = (): string | null => {
  if (text === undefined) {
    try {
      text = readFileSync(CHANGELOG_FILE, "utf8")
    } catch {
      text = null
    }
  }
  return text
}

export const changelogRoutes = [
  route(
    "GET",
    CHANGELOG_PATH,
    Effect.suspend(() => {
      const body = changelogText()
      if (body === null) return Effect.fail(new NotFound({ message: "this installation has no CHANGELOG.md" }))
      return Effect.succeed(HttpServerResponse.text(body, {
        contentType: "text/markdown; charset=utf-8",
        headers: { "cache-control": "no-cache", "x-content-type-options": "nosniff" }
      }))
    })
  )
]

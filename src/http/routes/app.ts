/**
 * The admin app at `/app`: the files `npm ci` built into app/dist (read once, on the first
 * request for one, then served from memory), and its session endpoints. The app itself is a client of the admin API on the
 * same origin, authenticated by the session cookie (see admin-auth.ts).
 *
 * Every app response carries a strict Content-Security-Policy: scripts, styles, images and
 * fetches from this origin only, no inline script or style, no framing, no plugins, forms posting
 * only here. The build emits no inline code, so nothing needs a hash or `unsafe-inline`.
 */
import { Effect, Schema } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { extname, join, relative, sep } from "node:path"
import { fileURLToPath } from "node:url"
import { NotFound } from "../../domain/errors.ts"
import { VERSION } from "../../domain/version.ts"
import { decodeStrict } from "../../domain/validation.ts"
import { CurrentRequest, RequestBody } from "../../pipelines/request.ts"
import { json } from "../../pipelines/respond.ts"
import { route } from "../router.ts"
import type { AdminAuth, AdminSession } from "./admin-auth.ts"

export const APP_DIST = fileURLToPath(new URL("../../../app/dist/", import.meta.url))

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'"
].join("; ")

const securityHeaders = {
  "content-security-policy": CONTENT_SECURITY_POLICY,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin"
}

const contentTypes: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".txt": "text/plain; charset=utf-8",
  ".woff2": "font/woff2"
}

interface StaticFile {
  readonly body: Uint8Array
  readonly contentType: string
  /** Vite puts a content hash in every asset's name, so those never change under the same URL. */
  readonly immutable: boolean
}

/** Every built file by its URL path below /app/ (`index.html`, `assets/index-1a2b.js`). */
export const loadStaticFiles = (root: string): ReadonlyMap<string, StaticFile> => {
  const files = new Map<string, StaticFile>()
  if (!existsSync(root)) return files
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name)
      if (statSync(path).isDirectory()) walk(path)
      else {
        const urlPath = relative(root, path).split(sep).join("/")
        const type = contentTypes[extname(name).toLowerCase()]
        if (type === undefined) continue
        files.set(urlPath, { body: readFileSync(path), contentType: type, immutable: urlPath.startsWith("assets/") })
      }
    }
  }
  walk(root)
  return files
}

export interface AppRoutesOptions {
  readonly auth: AdminAuth
  /** Where the built app is; tests may point elsewhere. */
  readonly dist?: string
  /** `admin.oidc`: the sign-in button's name and where it starts (an absolute URL on the public origin). */
  readonly identityProvider?: { readonly name: string; readonly startUrl: string } | undefined
}

const SignIn = Schema.Struct({ token: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(4096)) })

export const appRoutes = (options: AppRoutesOptions) => {
  // Read on first use: a gateway whose admin app is never opened does not hold it in memory.
  let loaded: ReadonlyMap<string, StaticFile> | undefined
  const staticFiles = () => (loaded ??= loadStaticFiles(options.dist ?? APP_DIST))

  const serve = (path: string) =>
    Effect.gen(function*() {
      // Unknown paths below /app get the app's page (it routes in the browser), but a missing
      // asset stays a 404 so a stale page does not execute HTML as a script.
      const files = staticFiles()
      const file = files.get(path) ?? (path.startsWith("assets/") ? undefined : files.get("index.html"))
      if (file === undefined) {
        return yield* new NotFound({
          message: files.size === 0
            ? "the admin app is not built: run `npm ci` (or `npm run build:app`) and restart"
            : `no file /app/${path.slice(0, 200)}`
        })
      }
      return HttpServerResponse.uint8Array(file.body, {
        contentType: file.contentType,
        headers: {
          ...securityHeaders,
          "cache-control": file.immutable ? "public, max-age=31536000, immutable" : "no-cache"
        }
      })
    })

  const noStore = { "cache-control": "no-store", ...securityHeaders }

  const sessionView = (session: AdminSession) => ({
    signed_in: true,
    csrf_token: session.csrfToken,
    expires_at: new Date(session.expiresAt).toISOString(),
    // Who signed in, when it was an identity-provider admin (the admin token names no one).
    admin: session.admin === undefined ? null : { subject: session.admin.subject, name: session.admin.displayName },
    // The running server's release for the app's footer (issue 40): the server's, not the build's
    // of the app, and only to a signed-in admin.
    version: VERSION
  })

  // How one may sign in, for the sign-in page: the admin token always, an identity provider when configured.
  const signInOptions = {
    identity_provider: options.identityProvider === undefined
      ? null
      : { name: options.identityProvider.name, start_url: options.identityProvider.startUrl }
  }

  return [
    route("GET", "/app", serve("index.html")),
    route("GET", "/app/*", Effect.flatMap(CurrentRequest, (state) => serve(state.params["*"] ?? ""))),
    route("GET", "/app/sign-in", Effect.succeed(HttpServerResponse.setHeaders(json(signInOptions), noStore))),
    route("GET", "/app/session", Effect.gen(function*() {
      const session = yield* options.auth.currentSession
      // No session is an answer, not an error: the sign-in page asks this on every load, and a 401
      // there would put an error in every browser console. A forged cookie is still a 401.
      if (session === undefined) return HttpServerResponse.setHeaders(json({ signed_in: false }), noStore)
      return HttpServerResponse.setHeaders(json(sessionView(session)), noStore)
    })),
    route("POST", "/app/session", Effect.gen(function*() {
      const input = yield* decodeStrict(SignIn)(yield* (yield* RequestBody).jsonObject)
      const { session, setCookie } = yield* options.auth.signIn(input.token)
      return HttpServerResponse.setHeaders(json(sessionView(session), 201), { ...noStore, "set-cookie": setCookie })
    })),
    route("DELETE", "/app/session", Effect.gen(function*() {
      // Signing out changes state too, so it needs the CSRF proof; without a valid session there
      // is nothing to protect and the cookie is cleared anyway.
      const session = yield* options.auth.currentSession
      if (session !== undefined) yield* options.auth.checkCsrf(session)
      return HttpServerResponse.setHeaders(HttpServerResponse.empty({ status: 204 }), { ...noStore, "set-cookie": options.auth.clearCookie })
    }))
  ]
}

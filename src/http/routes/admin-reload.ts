/**
 * `POST /admin/reload`: the admin API's way to what SIGHUP does (services/config/ConfigReload):
 * 200 with the live settings that changed; 409 `conflict` naming every setting that needs a
 * restart (nothing applied); 422 when the configuration no longer loads (nothing applied).
 */
import { Effect } from "effect"
import { ConfigReload } from "../../services/config/ConfigReload.ts"
import { json } from "../../pipelines/respond.ts"
import { route } from "../router.ts"
import { auditChange } from "./admin-audit.ts"
import type { AdminAuth } from "./admin-auth.ts"

export const adminReloadRoutes = (options: { readonly auth: AdminAuth }) => [
  route("POST", "/admin/reload", Effect.andThen(options.auth.requireAdmin, Effect.gen(function*() {
    const result = yield* (yield* ConfigReload).reload
    yield* auditChange({ target: { kind: "config", id: "reload" }, after: { changed: result.changed } })
    return json({ reloaded: true, ...result })
  })))
]

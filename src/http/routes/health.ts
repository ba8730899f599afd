/** Liveness for load balancers: no auth, no store round trip, nothing a client could abuse. */
import { Effect } from "effect"
import { json } from "../../pipelines/respond.ts"
import { route } from "../router.ts"

export const healthRoutes = [route("GET", "/healthz", Effect.succeed(json({ status: "ok" })))]

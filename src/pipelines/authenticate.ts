/**
 * The first stages every client request goes through, in the order of decisions section 4:
 * authenticate the key (and, from the limits issue on, count the request against its rate).
 */
import { Effect } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { CurrentRequest } from "../http/request-context.ts"
import { Auth } from "../services/auth/Auth.ts"

export const authenticateRequest = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const state = yield* CurrentRequest
  const key = yield* (yield* Auth).authenticate(request.headers)
  state.audit.key_id = key.id
  return key
})

/**
 * The rule of issue 34: a field a client sends on its own never fails a request on any provider
 * kind. Where the target has an equivalent the field is translated; where it has none (and the
 * field only tunes delivery or tags the request) it is left out, and every field left out is
 * named, comma-separated, in the response header `x-modelgate-dropped` and in the audit record's
 * `details.dropped`, so a client or an operator can see what the vendor never saw. What the user
 * chose and no target can do (log probabilities, a vendor's server tools) stays refused by name.
 */
import type { RequestState } from "../request.ts"

export const DROPPED_HEADER = "x-modelgate-dropped"

/** Records the paths (`client_metadata`, `messages.3.output_config`...) an attempt left out. */
export const recordDropped = (state: RequestState, paths: ReadonlyArray<string>): void => {
  if (paths.length === 0) return
  const earlier = state.audit.details?.["dropped"]
  const all = [...new Set([...(Array.isArray(earlier) ? earlier as ReadonlyArray<string> : []), ...paths])]
  state.audit.details = { ...state.audit.details, dropped: all }
  state.headers[DROPPED_HEADER] = all.join(",")
}

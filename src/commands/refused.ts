/**
 * A command's refusal of its input, or of what the store answered (what the admin API would
 * answer 4xx): the command line prints `modelgate: <message>` on stderr and exits 1.
 */
import * as Data from "effect/Data"

export class Refused extends Data.TaggedError("Refused")<{ readonly message: string }> {}

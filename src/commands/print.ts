/** How the store commands print what they did: indented JSON on stdout, for people and for jq. */
import * as Console from "effect/Console"
export const printJson = (value: unknown) => Console.log(JSON.stringify(value, null, 2))

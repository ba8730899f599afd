/**
 * Checks that go past "it decodes" (issue 39 item 4): a strict decoder that accepts a body must
 * give back what the client sent, field for field (nothing dropped, renamed, defaulted or
 * coerced on the way), or the gateway would forward or read something else than was asked.
 */
import { expect } from "vitest"

type Decoded<A> = { readonly ok: true; readonly value: A } | { readonly ok: false }

/** `decode(body)` accepts the body and its value equals the body. Returns the value. */
export const expectDecodesUnchanged = <A>(decode: (body: unknown) => Decoded<A>, body: unknown, what?: string): A => {
  const result = decode(body)
  expect(result, what).toEqual({ ok: true, value: body })
  return (result as { readonly value: A }).value
}

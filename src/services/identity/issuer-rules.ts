/**
 * What an issuer's configuration may say, apart from the verifier (issuer.ts) so that the config
 * loader checks it without loading jose: every CLI command loads the config, none verifies a token.
 */

/** The algorithms an issuer may sign with: asymmetric only. */
export const ASYMMETRIC_ALGORITHMS: ReadonlyArray<string> = [
  "RS256", "RS384", "RS512",
  "PS256", "PS384", "PS512",
  "ES256", "ES384", "ES512",
  "EdDSA", "Ed25519"
]

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]", "::1"])

/** https, or plain http on a loopback host (a test or development issuer). */
export const isAcceptableIssuerUrl = (value: string): boolean => {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return false
  }
  if (url.username !== "" || url.password !== "" || url.hash !== "") return false
  return url.protocol === "https:" || (url.protocol === "http:" && LOOPBACK_HOSTS.has(url.hostname))
}

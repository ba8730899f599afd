/**
 * What an upstream says is relayed to clients, logs and the audit trail, and upstreams quote
 * credentials back ("Incorrect API key provided: sk-...abcd"). Every relayed text passes
 * through a redactor that removes the provider's configured key wherever it appears, and any
 * token shaped like an API key or bearer credential, masked or not, an AWS access key id, or a
 * part of a SigV4 signature, a Google API key or OAuth access token, or a private key.
 */
const REDACTED = "[redacted]"

/** `sk-...`, `sk-ant-...`, `sk-proj-...`, `rk-`/`pk-` keys, including masked forms (`sk-abc***wxyz`). */
const KEY_LIKE = /\b(?:sk|rk|pk)-[A-Za-z0-9_\-*.]{4,}/g
const BEARER = /\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=\-*]{6,}/gi
/** AWS access key ids (long-term `AKIA...`, temporary `ASIA...`) wherever a message quotes one. */
const AWS_KEY_ID = /\b(?:AKIA|ASIA)[A-Z0-9]{16}\b/g
/** The parts of a SigV4 `Authorization` header an error may echo (AWS quotes the canonical request). */
const SIGV4_PART = /\b(Credential|Signature|X-Amz-Security-Token|X-Amz-Credential|X-Amz-Signature)=[^\s,&"']+/gi

/** Google API keys (`AIza` and 35 more characters) and OAuth access tokens (`ya29.`). */
const GOOGLE_KEY = /\bAIza[0-9A-Za-z_-]{35}\b/g
const GOOGLE_TOKEN = /\bya29\.[0-9A-Za-z._-]+/g
/** A PEM private key (a service account's), should an error ever quote one. */
const PRIVATE_KEY = /-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)/g

export type Redact = (text: string) => string

export const makeRedactor = (secrets: ReadonlyArray<string | undefined>): Redact => {
  // Short strings would redact ordinary words; a real key is far longer than 8 characters.
  const exact = secrets.filter((s): s is string => typeof s === "string" && s.length >= 8)
  return (text) => {
    let out = text
    for (const secret of exact) out = out.split(secret).join(REDACTED)
    return out.replace(KEY_LIKE, REDACTED).replace(BEARER, (_, scheme: string) => `${scheme} ${REDACTED}`)
      .replace(AWS_KEY_ID, REDACTED).replace(SIGV4_PART, (_, name: string) => `${name}=${REDACTED}`)
      .replace(GOOGLE_KEY, REDACTED).replace(GOOGLE_TOKEN, REDACTED).replace(PRIVATE_KEY, REDACTED)
  }
}

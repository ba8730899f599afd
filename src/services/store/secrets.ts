/**
 * Secrets at rest in the store (issue 22, finding 6): connection DSNs added through the admin
 * API hold database passwords. With `secrets.key` set they are stored sealed (AES-256-GCM, the
 * key derived from the configured text with SHA-256, a fresh 96-bit IV each time) as
 * `enc:v1:<base64url iv|tag|ciphertext>`; without it they stay as they were (an embedded
 * default must start with no setup), which the README says.
 *
 * Rotation: set the new text as `secrets.key` and move the old one to `secrets.previous_keys`;
 * at start every stored DSN that does not open with the current key is opened with a previous
 * one (or read as plain text) and sealed again with the current key. Then the old key can go.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto"
import * as Context from "effect/Context"

export const SEALED_PREFIX = "enc:v1:"

export interface StoreSecretsShape {
  readonly key: string | undefined
  readonly previousKeys: ReadonlyArray<string>
}

export class StoreSecrets extends Context.Service<StoreSecrets, StoreSecretsShape>()("modelgate/StoreSecrets") {}

const keyBytes = (text: string) => createHash("sha256").update(`modelgate/store-secrets/v1\0${text}`).digest()

export const seal = (plain: string, key: string): string => {
  const iv = randomBytes(12)
  const cipher = createCipheriv("aes-256-gcm", keyBytes(key), iv)
  const body = Buffer.concat([cipher.update(plain, "utf8"), cipher.final()])
  return SEALED_PREFIX + Buffer.concat([iv, cipher.getAuthTag(), body]).toString("base64url")
}

export const isSealed = (value: string) => value.startsWith(SEALED_PREFIX)

/** The plain text of a sealed value under `key`, or undefined when it does not open with it. */
export const openWith = (value: string, key: string): string | undefined => {
  try {
    const bytes = Buffer.from(value.slice(SEALED_PREFIX.length), "base64url")
    const decipher = createDecipheriv("aes-256-gcm", keyBytes(key), bytes.subarray(0, 12))
    decipher.setAuthTag(bytes.subarray(12, 28))
    return Buffer.concat([decipher.update(bytes.subarray(28)), decipher.final()]).toString("utf8")
  } catch {
    return undefined
  }
}

/** A stored value as plain text: opened with the first key that opens it; a plain value as it is. */
export const openStored = (value: string, secrets: StoreSecretsShape): string => {
  if (!isSealed(value)) return value
  for (const key of [secrets.key, ...secrets.previousKeys]) {
    if (key === undefined) continue
    const plain = openWith(value, key)
    if (plain !== undefined) return plain
  }
  throw new Error("a stored secret does not open with secrets.key or any of secrets.previous_keys")
}

/** How a value is stored: sealed with the current key when there is one. */
export const toStored = (plain: string, secrets: StoreSecretsShape): string => (secrets.key === undefined ? plain : seal(plain, secrets.key))

export const noSecrets: StoreSecretsShape = { key: undefined, previousKeys: [] }

/** API key material: format, generation and the one-way hash that is all the store keeps. */
import { hash, randomBytes } from "node:crypto"

export const KEY_PREFIX = "sk-mg-"
export const KEY_PATTERN = /^sk-mg-[0-9a-f]{32}$/

export const generateKey = (): string => KEY_PREFIX + randomBytes(16).toString("hex")

/** SHA-256, hex. Node's one-shot `hash` (no Hash object per call): it runs on every authenticated request. */
export const hashKey = (key: string): string => hash("sha256", key, "hex")

/** Enough to recognise a key in a list (`sk-mg-1a2b...9f0e`), not enough to use it. */
export const keyHint = (key: string): string => `${key.slice(0, KEY_PREFIX.length + 4)}...${key.slice(-4)}`

export const newKeyId = (): string => `key_${randomBytes(8).toString("hex")}`

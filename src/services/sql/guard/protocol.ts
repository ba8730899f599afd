/** Messages between the guard's pool (pool.ts) and its worker threads (worker.ts). */
import type { Classified, Dialect } from "./index.ts"

export type GuardTask =
  | { readonly id: number; readonly op: "statement"; readonly dialect: Dialect; readonly sql: string }
  | { readonly id: number; readonly op: "explain"; readonly dialect: Dialect; readonly sql: string; readonly analyze: boolean }

export type GuardReply =
  | { readonly ready: true }
  | { readonly id: number; readonly ok: true; readonly result: Classified }
  | { readonly id: number; readonly ok: false; readonly error: string }

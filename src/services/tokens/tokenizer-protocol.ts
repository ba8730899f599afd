/** Messages between the estimator (TokenEstimator.ts) and the tokenizer's thread (tokenizer-worker.ts). */
export interface TokenizerTask {
  readonly id: number
  readonly text: string
}

export type TokenizerReply =
  | { readonly ready: true }
  | { readonly id: number; readonly ok: true; readonly count: number }
  | { readonly id: number; readonly ok: false; readonly error: string }

/**
 * What the reservation bound's input estimate costs per request (issue 33, src/domain/pricing.ts
 * `estimateInput`), against the tokenizer the gateway has (TokenEstimator's sampled o200k count):
 * a 1 MiB chat body and a 2 KB one. Run: npx node bench/pricing-estimate.ts
 */
import { estimateInput } from "../src/domain/pricing.ts"
import { countTokens } from "gpt-tokenizer/encoding/o200k_base"
import { estimateWith } from "../src/services/tokens/TokenEstimator.ts"
const para = "The quick brown fox jumps over the lazy dog while the gateway counts every byte of its text. "
const messages = [] as Array<unknown>
let size = 0
while (size < 1_048_576) { const content = para.repeat(20); messages.push({ role: messages.length % 2 ? "assistant" : "user", content }); size += content.length + 40 }
const body = JSON.parse(JSON.stringify({ model: "m", max_tokens: 1000, messages }))
for (let i = 0; i < 20; i++) estimateInput(body)
let t = performance.now(); const N = 200
for (let i = 0; i < N; i++) estimateInput(body)
const per = (performance.now() - t) / N
const small = JSON.parse(JSON.stringify({ model: "m", messages: [{ role: "user", content: para.repeat(20) }] }))
for (let i = 0; i < 1000; i++) estimateInput(small)
t = performance.now(); for (let i = 0; i < 20000; i++) estimateInput(small)
const perSmall = (performance.now() - t) / 20000
t = performance.now(); for (let i = 0; i < 5; i++) estimateWith(countTokens, body); const tok = (performance.now() - t) / 5
console.log(JSON.stringify({ bytes: JSON.stringify(body).length, estimate_ms: per.toFixed(3), small_us: (perSmall * 1000).toFixed(2), tokenizer_sampled_ms: tok.toFixed(2), estimate: estimateInput(body).tokens, tokens: estimateWith(countTokens, body) }))

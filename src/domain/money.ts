/**
 * Credits as the gateway counts them (issue 33): exact decimals with six fractional digits.
 *
 * Every amount the money path holds, adds or stores is an integer number of **micro-credits**
 * (1 credit = 1,000,000 micros), so sums never drift: the ledger sums to the balance exactly,
 * however many fractional charges it holds. Decimals exist only at the edges: what a client or an
 * operator writes (config, `POST /workspace/credits`, a budget) is turned into micros once, by
 * `toMicros`, which refuses more than six fractional digits instead of rounding them away; what the
 * gateway answers is turned back by `fromMicros`.
 *
 * JavaScript numbers hold integers exactly up to 2^53, so the largest amount is
 * `MAX_MICROS` (about 9 billion credits); the store's BIGINT columns hold more, the gateway never
 * writes more.
 */
export const MICROS_PER_CREDIT = 1_000_000

/** The largest amount, in micros, any balance, charge or budget may reach. */
export const MAX_MICROS = Number.MAX_SAFE_INTEGER

/** The largest amount in credits (about 9.007e9). */
export const MAX_CREDITS = Math.floor(MAX_MICROS / MICROS_PER_CREDIT)

/**
 * Credits written as a decimal -> micros, exactly, or undefined when the value is not a finite,
 * non-negative number of at most six fractional digits within MAX_CREDITS. Goes through the
 * number's shortest decimal form (what JSON and YAML wrote), so `0.1` is 100000 micros, not the
 * 100000.00000000001 a multiplication gives.
 */
export const toMicros = (credits: number): number | undefined => {
  if (!Number.isFinite(credits) || credits < 0 || credits > MAX_CREDITS) return undefined
  const text = credits.toString()
  // Exponent forms: 1e-7 has too many digits; 1e21 is past MAX_CREDITS already.
  if (/e/i.test(text)) {
    const micros = credits * MICROS_PER_CREDIT
    return Number.isSafeInteger(micros) && micros / MICROS_PER_CREDIT === credits ? micros : undefined
  }
  const [whole, fraction = ""] = text.split(".")
  if (fraction.length > 6) return undefined
  const micros = Number(whole) * MICROS_PER_CREDIT + Number(fraction.padEnd(6, "0"))
  return Number.isSafeInteger(micros) && micros <= MAX_MICROS ? micros : undefined
}

/** Micros -> credits as a JSON number, e.g. 1500000 -> 1.5, 1 -> 0.000001. */
export const fromMicros = (micros: number): number => {
  const sign = micros < 0 ? "-" : ""
  const magnitude = Math.abs(micros)
  const whole = Math.floor(magnitude / MICROS_PER_CREDIT)
  const fraction = magnitude % MICROS_PER_CREDIT
  return Number(`${sign}${whole}.${String(fraction).padStart(6, "0")}`)
}

/** Micros -> a fixed six-digit decimal string (CSV, logs): 1500000 -> "1.500000". */
export const microsToDecimalString = (micros: number): string => {
  const sign = micros < 0 ? "-" : ""
  const magnitude = Math.abs(micros)
  return `${sign}${Math.floor(magnitude / MICROS_PER_CREDIT)}.${String(magnitude % MICROS_PER_CREDIT).padStart(6, "0")}`
}

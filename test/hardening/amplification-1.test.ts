/** The expansion budget's table (amplification.ts), first part: OpenAI, Azure, Anthropic and echo rows. */
import { defineAmplification, PARTS } from "./amplification.ts"

defineAmplification(PARTS[0])

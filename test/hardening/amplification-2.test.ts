/** The expansion budget's table (amplification.ts), second part: Bedrock, Gemini and Vertex rows, MCP and the admin API. */
import { defineAmplification, PARTS } from "./amplification.ts"

defineAmplification(PARTS[1])

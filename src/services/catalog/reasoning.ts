/**
 * Whether a model reasons (`models[].reasoning`), which decides whether a translated request
 * carries reasoning fields at all: OpenAI refuses `reasoning_effort` for a model that does not
 * reason (Claude Code's thinking reached `gpt-4.1-mini` that way), and Anthropic refuses
 * `thinking` for one that cannot think. A passthrough is not touched: there the client chose
 * its fields for the vendor it speaks to.
 *
 * Without a configured value the id decides: OpenAI's o-series and the gpt-5 families (and
 * later) reason, and so do Claude models from 3.7 on; anything else (gpt-4o, gpt-4.1, open
 * models behind an OpenAI-compatible server) is taken not to, and an operator who serves a
 * reasoning model there says `reasoning: true`.
 */
import type { CatalogModel } from "./ModelCatalog.ts"

/** OpenAI's reasoning families: o1, o3, o4-mini...; gpt-5, gpt-5.1, gpt-6... */
const OPENAI_REASONING = /^(o\d+(?![a-z])|gpt-([5-9]|\d{2,}))/
/** Claude models that cannot think: the 1, 2, instant and 3.x generations before 3.7. */
const CLAUDE_WITHOUT_THINKING = /^claude-(instant|[12]|3-(?!7)|3-5|3\.5)/

const reasonsById = (id: string): boolean => {
  // Routers prefix the vendor (`openai/gpt-5`, `anthropic/claude-...`): the last segment names the model.
  const name = id.slice(id.lastIndexOf("/") + 1).toLowerCase()
  if (OPENAI_REASONING.test(name)) return true
  // Bedrock and Vertex spell Claude with a region and vendor in front (`eu.anthropic.claude-...`).
  const claude = name.indexOf("claude-")
  return claude !== -1 && !CLAUDE_WITHOUT_THINKING.test(name.slice(claude))
}

export const modelReasons = (model: Pick<CatalogModel, "id" | "reasoning">): boolean => model.reasoning ?? reasonsById(model.id)

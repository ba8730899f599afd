/** The model and tool surfaces. Each route is one pipeline (src/pipelines). */
import { mcpDeletePipeline, mcpPostPipeline } from "../../pipelines/mcp.ts"
import { chatCompletionsFormat } from "../../pipelines/model/chat/format.ts"
import { countTokensPipeline } from "../../pipelines/model/count-tokens.ts"
import { embeddingsPipeline } from "../../pipelines/model/embeddings.ts"
import { messagesFormat } from "../../pipelines/model/messages/format.ts"
import { modelPipeline } from "../../pipelines/model/pipeline.ts"
import { responsesFormat } from "../../pipelines/model/responses/format.ts"
import { route } from "../router.ts"

export const completionRoutes = [
  route("POST", "/v1/chat/completions", modelPipeline(chatCompletionsFormat)),
  route("POST", "/v1/messages", modelPipeline(messagesFormat)),
  route("POST", "/v1/messages/count_tokens", countTokensPipeline),
  route("POST", "/v1/responses", modelPipeline(responsesFormat)),
  route("POST", "/v1/embeddings", embeddingsPipeline),
  route("POST", "/v1/mcp", mcpPostPipeline),
  route("DELETE", "/v1/mcp", mcpDeletePipeline)
]

/** The model and tool surfaces. Each route is one pipeline (src/pipelines). */
import { mcpDeletePipeline, mcpPostPipeline } from "../../pipelines/mcp.ts"
import { chatCompletionsFormat } from "../../pipelines/model/chat/format.ts"
import { countTokensPipeline } from "../../pipelines/model/count-tokens.ts"
import { embeddingsPipeline } from "../../pipelines/model/embeddings.ts"
import { messagesFormat } from "../../pipelines/model/messages/format.ts"
import { legacyCompletionsPipeline, moderationsPipeline } from "../../pipelines/model/legacy.ts"
import { modelPipeline } from "../../pipelines/model/pipeline.ts"
import { responsesFormat } from "../../pipelines/model/responses/format.ts"
import { responsesSession } from "../../pipelines/model/responses/state.ts"
import { codexToolsSession } from "../../pipelines/model/responses/tools.ts"
import { deleteStoredResponse, listStoredInputItems, retrieveStoredResponse } from "../../pipelines/model/responses/stored.ts"
import { route } from "../router.ts"

export const completionRoutes = [
  route("POST", "/v1/chat/completions", modelPipeline(chatCompletionsFormat)),
  route("POST", "/v1/messages", modelPipeline(messagesFormat)),
  route("POST", "/v1/messages/count_tokens", countTokensPipeline),
  route(
    "POST",
    "/v1/responses",
    modelPipeline(responsesFormat, (context, client) => {
      // Forwarded as sent only to a provider serving the Responses API itself (responses/openai.ts);
      // for any other, Codex's tool forms are flattened to functions (responses/tools.ts).
      const passthrough = client.kind === "openai" && client.responses !== undefined
      return codexToolsSession(responsesSession(context, passthrough ? context.resolved.provider.name : undefined), !passthrough)
    })
  ),
  route("GET", "/v1/responses/:id", retrieveStoredResponse),
  route("DELETE", "/v1/responses/:id", deleteStoredResponse),
  route("GET", "/v1/responses/:id/input_items", listStoredInputItems),
  route("POST", "/v1/embeddings", embeddingsPipeline),
  route("POST", "/v1/completions", legacyCompletionsPipeline),
  route("POST", "/v1/moderations", moderationsPipeline),
  route("POST", "/v1/mcp", mcpPostPipeline),
  route("DELETE", "/v1/mcp", mcpDeletePipeline)
]

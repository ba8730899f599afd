/** The model surfaces. Each route is one pipeline (src/pipelines). */
import { chatCompletionsPipeline } from "../../pipelines/chat-completions.ts"
import { mcpDeletePipeline, mcpPostPipeline } from "../../pipelines/mcp.ts"
import { messagesPipeline } from "../../pipelines/messages.ts"
import { route } from "../router.ts"

export const completionRoutes = [
  route("POST", "/v1/chat/completions", chatCompletionsPipeline),
  route("POST", "/v1/messages", messagesPipeline),
  route("POST", "/v1/mcp", mcpPostPipeline),
  route("DELETE", "/v1/mcp", mcpDeletePipeline)
]

/** Request bodies today's clients send, shared by the wire tests. */

/** The shape of a Claude Code request with its defaults (thinking on, betas, system reminders). */
export const claudeCodeBody = {
  model: "claude-sonnet-4-5-20250929",
  max_tokens: 32000,
  stream: true,
  system: [{ type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } }],
  messages: [
    { role: "user", content: [{ type: "text", text: "list the files", cache_control: { type: "ephemeral", ttl: "1h" } }] },
    { role: "system", content: "<system-reminder>Today is Monday.</system-reminder>" },
    {
      role: "assistant",
      content: [
        { type: "thinking", thinking: "I should run ls.", signature: "sig" },
        { type: "tool_use", id: "toolu_01", name: "Bash", input: { command: "ls" } }
      ]
    },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: "README.md" }] }
  ],
  tools: [{
    name: "Bash",
    description: "Run a shell command",
    input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
    eager_input_streaming: true,
    defer_loading: false,
    cache_control: { type: "ephemeral" }
  }],
  thinking: { type: "enabled", budget_tokens: 31999, display: "summarized" },
  output_config: { effort: "high" },
  context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
  metadata: { user_id: "user_abc_account_def_session_ghi" }
}

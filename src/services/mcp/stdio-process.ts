/**
 * A stdio MCP server as a Transport for the SDK's Client (issue 37): the gateway starts the
 * process and speaks newline-delimited JSON-RPC on its stdin and stdout. Not the SDK's own stdio
 * transport, because that one always hands the process HOME, LOGNAME, PATH, SHELL, TERM and USER
 * of the gateway's environment; here the process gets exactly the environment the config gives
 * it, and nothing of the gateway's (its credentials least of all).
 */
import type { JSONRPCMessage, Transport } from "@modelcontextprotocol/client"
import { type ChildProcess, spawn } from "node:child_process"
import { accessSync, constants } from "node:fs"
import { delimiter, isAbsolute, join } from "node:path"

type ClientModule = typeof import("@modelcontextprotocol/client")

/** The largest message a server may send on one line (the SDK's own default bound). */
const MAX_LINE_BYTES = 10 * 1024 * 1024

/**
 * The command as a path: the process's environment has no PATH unless the config gives one, so
 * a bare name (`node`) is looked up here, in the gateway's PATH, once.
 */
export const resolveCommand = (command: string, path: string | undefined): string => {
  if (isAbsolute(command) || command.includes("/")) return command
  for (const dir of (path ?? "").split(delimiter)) {
    if (dir === "") continue
    const candidate = join(dir, command)
    try {
      accessSync(candidate, constants.X_OK)
      return candidate
    } catch {
      // not here
    }
  }
  return command
}

export class StdioProcessTransport implements Transport {
  onclose?: (() => void) | undefined
  onerror?: ((error: Error) => void) | undefined
  onmessage?: ((message: JSONRPCMessage) => void) | undefined
  #child: ChildProcess | undefined
  readonly #sdk: ClientModule
  readonly #command: string
  readonly #args: ReadonlyArray<string>
  readonly #env: Readonly<Record<string, string>>

  constructor(sdk: ClientModule, command: string, args: ReadonlyArray<string>, env: Readonly<Record<string, string>>) {
    this.#sdk = sdk
    this.#command = command
    this.#args = args
    this.#env = env
  }

  /** The process id while it runs. */
  get pid(): number | undefined {
    return this.#child?.pid
  }

  start(): Promise<void> {
    return new Promise((resolve, reject) => {
      const child = spawn(this.#command, [...this.#args], { env: { ...this.#env }, stdio: ["pipe", "pipe", "pipe"], shell: false })
      this.#child = child
      const buffer = new this.#sdk.ReadBuffer({ maxBufferSize: MAX_LINE_BYTES })
      child.once("error", (error) => {
        reject(error)
        this.onerror?.(error)
      })
      child.once("spawn", () => resolve())
      child.once("close", () => {
        this.#child = undefined
        this.onclose?.()
      })
      child.stdout!.on("data", (chunk: Buffer) => {
        try {
          buffer.append(chunk)
          for (let message = buffer.readMessage(); message !== null; message = buffer.readMessage()) this.onmessage?.(message)
        } catch (error) {
          this.onerror?.(error as Error)
        }
      })
      // The server's log: read so the pipe never fills, and dropped (it may echo its credentials).
      child.stderr!.resume()
      child.stdin!.on("error", (error) => this.onerror?.(error))
    })
  }

  send(message: JSONRPCMessage): Promise<void> {
    const stdin = this.#child?.stdin
    if (stdin === undefined || stdin === null) return Promise.reject(new Error("the server's process is not running"))
    return new Promise((resolve, reject) => {
      stdin.write(this.#sdk.serializeMessage(message), (error) => (error ? reject(error) : resolve()))
    })
  }

  close(): Promise<void> {
    const child = this.#child
    if (child === undefined) return Promise.resolve()
    return new Promise((resolve) => {
      child.once("close", () => resolve())
      child.stdin?.end()
      child.kill("SIGTERM")
      // One that ignores SIGTERM is killed.
      setTimeout(() => child.kill("SIGKILL"), 2_000).unref()
    })
  }
}

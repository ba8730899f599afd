/**
 * The command line as the parser sees it. `modelgate help [command...]` is the same as
 * `modelgate [command...] --help`: people type `help` first, and the parser alone would call it
 * an unknown command.
 */

/** The root's and Effect's built-in flags that take a value: that value is not a command word. */
const VALUED_FLAGS: ReadonlySet<string> = new Set(["--config", "-c", "--log-level", "--completions"])

/**
 * The words of `argv` that are not flags or a flag's value, with their positions: the command
 * and its subcommands come first (`--config F keys list`: `keys`, `list`). A leaf command's own
 * flags may follow; whoever reads the words stops at the leaf.
 */
export const commandWords = (argv: ReadonlyArray<string>): ReadonlyArray<{ readonly index: number; readonly word: string }> => {
  const words: Array<{ index: number; word: string }> = []
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--") break
    if (arg.startsWith("-")) {
      if (VALUED_FLAGS.has(arg)) i++
      continue
    }
    words.push({ index: i, word: arg })
  }
  return words
}

export const cliArgs = (argv: ReadonlyArray<string>): ReadonlyArray<string> => {
  const first = commandWords(argv)[0]
  if (first === undefined || first.word !== "help") return argv
  // Flags before `help` (`--config F help keys`) are kept; what follows names the command.
  return [...argv.slice(0, first.index), ...argv.slice(first.index + 1), "--help"]
}

/**
 * The command line as the parser sees it. `modelgate help [command...]` is the same as
 * `modelgate [command...] --help`: people type `help` first, and the parser alone would call it
 * an unknown command.
 */
export const cliArgs = (argv: ReadonlyArray<string>): ReadonlyArray<string> => {
  const helpAt = argv.findIndex((arg) => !arg.startsWith("-"))
  if (helpAt === -1 || argv[helpAt] !== "help") return argv
  // Flags before `help` (`--config F help keys`) are kept; what follows names the command.
  return [...argv.slice(0, helpAt), ...argv.slice(helpAt + 1), "--help"]
}

// Loaded with `--import` into a child gateway by the fault tests of clocks (issue 35): each
// SIGUSR2 moves the process's wall clock (Date.now, new Date()) by TEST_CLOCK_SHIFT_MS (negative:
// back) and says so on stderr, as an NTP step or an operator's `date -s` would. Monotonic time
// (performance.now, process.hrtime) stays real. Plain JavaScript: loaded before any TypeScript.
const step = Number(process.env.TEST_CLOCK_SHIFT_MS ?? "0")
let offset = 0
const RealDate = Date
const realNow = RealDate.now.bind(RealDate)
class ShiftedDate extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(realNow() + offset)
    else super(...args)
  }
  static now() {
    return realNow() + offset
  }
}
globalThis.Date = ShiftedDate
process.on("SIGUSR2", () => {
  offset += step
  process.stderr.write(`test clock shifted by ${offset} ms\n`)
})

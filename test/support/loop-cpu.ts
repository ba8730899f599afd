/**
 * How long this process's event loop is away at a time, in CPU time of the loop's own thread
 * (process.threadCpuUsage between two turns of a 1 ms timer): what one piece of synchronous work
 * on the loop costs, whatever else the machine runs. A loaded machine stretches wall-clock gaps
 * (time spent waiting for a core) but not this, so a test can bound it without guessing the load.
 * Worker threads' CPU is not counted: work moved off the loop does not show here.
 */
const threadCpuMs = () => {
  const { user, system } = process.threadCpuUsage()
  return (user + system) / 1000
}

/** Starts watching; `stop()` ends it and returns the longest turn seen, in ms of the loop thread's CPU. */
export const watchLoopCpu = () => {
  let running = true
  let worst = 0
  let last = threadCpuMs()
  let timer: ReturnType<typeof setTimeout> | undefined
  const tick = () => {
    const now = threadCpuMs()
    worst = Math.max(worst, now - last)
    last = now
    if (running) timer = setTimeout(tick, 1)
  }
  timer = setTimeout(tick, 1)
  return {
    stop: () => {
      running = false
      if (timer !== undefined) clearTimeout(timer)
      tick()
      return worst
    }
  }
}

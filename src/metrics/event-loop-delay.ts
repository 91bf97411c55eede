// How long the event loop keeps work waiting: the delay of a timer beyond its interval.
//
// perf_hooks.monitorEventLoopDelay records the time between two runs of a timer of `resolution` ms,
// not the delay: an idle loop records the interval itself. prom-client reports those values as they
// are, so with the 100 ms sampling the service used (to spare the CPU of 100 wake-ups a second) its
// ingest_nodejs_eventloop_lag_p99_seconds read 0.101 s on an idle service and under load alike. Here
// the interval is taken off every statistic (the histogram's values are intervals plus delays, and
// the interval is fixed), so an idle loop reads about 0 and a loop blocked for 5 ms reads about 5 ms.
//
// The sampling interval decides how often a stall is seen, not how long it reads: a stall delays the
// timer that falls due during it by the rest of the stall. At 20 ms a stall of 5 ms or more is seen
// by at least one sample in four; one that repeats (a request that takes 5 ms to handle) shows in the
// percentiles, a lone one in the max. The libuv timer runs in C++, no JavaScript: 50 wake-ups a second
// (docs/performance.md, "Sizing": the idle cost measured).
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks';

export const EVENT_LOOP_SAMPLE_MS = 20;

export interface EventLoopDelaySnapshot {
  /** Seconds a timer waited beyond its interval: over the samples since the last reset. */
  min: number;
  max: number;
  mean: number;
  stddev: number;
  p50: number;
  p90: number;
  p99: number;
  /** Samples taken since the last reset. */
  samples: number;
}

export class EventLoopDelay {
  private histogram: IntervalHistogram | null = null;
  private readonly intervalNs: number;

  constructor(private readonly resolutionMs: number = EVENT_LOOP_SAMPLE_MS) {
    this.intervalNs = resolutionMs * 1e6;
  }

  /** Starts sampling (a worker that takes a slot; an idle standby does not sample). */
  start(): void {
    if (this.histogram !== null) return;
    this.histogram = monitorEventLoopDelay({ resolution: this.resolutionMs });
    this.histogram.enable();
  }

  stop(): void {
    this.histogram?.disable();
  }

  /** The delays since the last reset; then starts a new window. All zero before start() or any sample. */
  take(): EventLoopDelaySnapshot {
    const h = this.histogram;
    if (h === null || h.count === 0) return { min: 0, max: 0, mean: 0, stddev: 0, p50: 0, p90: 0, p99: 0, samples: 0 };
    const beyond = (ns: number) => Math.max(0, ns - this.intervalNs) / 1e9;
    const snapshot = {
      min: beyond(h.min),
      max: beyond(h.max),
      mean: beyond(h.mean),
      stddev: h.stddev / 1e9,
      p50: beyond(h.percentile(50)),
      p90: beyond(h.percentile(90)),
      p99: beyond(h.percentile(99)),
      samples: h.count,
    };
    h.reset();
    return snapshot;
  }
}

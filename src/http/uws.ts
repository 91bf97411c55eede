// Which uWebSockets.js build this process runs on. Two are installed, and the first that loads is used:
//
//   build    package                                        binaries for        needs
//   v20.57   uWebSockets.js (@btc-vision/uwebsockets.js)    Node 20, 22, 24     glibc >= 2.38 (Debian 13, Ubuntu 24.04, RHEL 10)
//   v20.30   uws-20.30 (@trufflesuite/uws-js-unofficial)    Node <= 20          older glibc (Debian 12)
//
// Each build's binary for this Node's ABI is required directly, never through its package's index:
// v20.30's index falls back to a JavaScript stand-in when its binary does not load ("Falling back to a
// NodeJS implementation"), which serves, reports itself ready and fails most of the HTTP contract.
// Where neither loads, uwsBuild() throws UwsUnavailable naming the Node version, the glibc and what to
// install; main.ts turns it into one line and an exit status, not a stack from a .node file.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type uWSModule from 'uWebSockets.js';

export type UWS = typeof uWSModule;

export interface UwsBuild {
  readonly uws: UWS;
  /** The uWebSockets.js version of the binary, e.g. "20.57.0". */
  readonly version: string;
  /** The npm package it came from. */
  readonly package: string;
  /** When it closes a connection idle since its last byte (compiled in, not configurable): idleCloseS(). */
  readonly idleTimeoutS: number;
}

/** The runtime a build is chosen for, as the start-up log and the errors name it. */
export interface Runtime {
  readonly node: string;
  /** The ABI number of native addons (process.versions.modules). */
  readonly abi: string;
  /** The C library's version, or null when it is not glibc (musl: neither build loads). */
  readonly glibc: string | null;
  readonly platform: string;
}

export function currentRuntime(): Runtime {
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  return { node: process.version, abi: process.versions.modules, glibc: header?.glibcVersionRuntime ?? null, platform: `${process.platform}-${process.arch}` };
}

interface Candidate {
  readonly version: string;
  readonly idleTimeoutS: number;
  /** As installed (package.json's alias), and as published. */
  readonly alias: string;
  readonly published: string;
  /** The binary for this runtime, relative to the package's main file. */
  readonly binary: (r: Runtime) => string;
}

/** In order of preference: the newer build wherever it loads. */
const CANDIDATES: readonly Candidate[] = [
  // Idle timeouts as measured (test/integration/uws-behaviour.test.ts): v20.57 closed a connection
  // 31.9 s after its last byte, with a request answered or half sent alike; v20.30 after 8-12 s.
  {
    version: '20.57.0',
    idleTimeoutS: 30,
    alias: 'uWebSockets.js',
    published: '@btc-vision/uwebsockets.js',
    binary: (r) => `uws_${r.platform.replace('-', '_')}_${r.abi}.node`,
  },
  {
    version: '20.30.0',
    idleTimeoutS: 10,
    alias: 'uws-20.30',
    published: '@trufflesuite/uws-js-unofficial',
    binary: (r) => `../binaries/uws_${r.platform.replace('-', '_')}_${r.abi}.node`,
  },
];

/**
 * When a build's idle close comes: uSockets counts socket timeouts in ticks of 4 s and arms one for
 * ceil(seconds / 4) ticks from the current tick, so with 10 s a connection idle since just before a
 * tick is closed after 8 s, one idle since just after it after 12 s (a CI run measured 8.988 s).
 */
const TIMER_TICK_S = 4;
export function idleCloseS(idleTimeoutS: number): { earliest: number; latest: number } {
  return { earliest: TIMER_TICK_S * (Math.ceil(idleTimeoutS / TIMER_TICK_S) - 1), latest: TIMER_TICK_S * Math.ceil(idleTimeoutS / TIMER_TICK_S) };
}

/**
 * The earliest idle close of any build: a gateway's upstream keep-alive must close idle connections
 * sooner, or a request written just as the service closes one gets no answer (deploy/gateway, deploy/k8s).
 */
export const EARLIEST_IDLE_CLOSE_S = Math.min(...CANDIDATES.map((c) => idleCloseS(c.idleTimeoutS).earliest));

/** Neither build loads here: the message names the runtime and what to do. */
export class UwsUnavailable extends Error {
  constructor(
    message: string,
    readonly attempts: readonly { version: string; error: string }[],
  ) {
    super(message);
    this.name = 'UwsUnavailable';
  }
}

/**
 * Loads the first build whose binary loads on `runtime`. `load` is require() (a test passes its own to
 * see what a runtime without a loadable build is told).
 */
export function chooseUwsBuild(runtime: Runtime, load: (path: string) => unknown = createRequire(import.meta.url)): UwsBuild {
  const resolve = createRequire(import.meta.url).resolve;
  const attempts: { version: string; error: string }[] = [];
  for (const c of CANDIDATES) {
    try {
      const path = join(dirname(resolve(c.alias)), c.binary(runtime));
      return { uws: load(path) as UWS, version: c.version, package: c.published, idleTimeoutS: c.idleTimeoutS };
    } catch (err) {
      attempts.push({ version: c.version, error: firstLine(err) });
    }
  }
  throw new UwsUnavailable(unavailableMessage(runtime), attempts);
}

function unavailableMessage(r: Runtime): string {
  const where = `Node ${r.node} on ${r.platform} with ${r.glibc === null ? 'a C library other than glibc' : `glibc ${r.glibc}`}`;
  const major = Number(r.node.replace(/^v/, '').split('.')[0]);
  let fix: string;
  if (!r.platform.startsWith('linux-')) fix = 'the service runs on Linux (x64 or arm64) only';
  else if (r.glibc === null)
    fix = 'uWebSockets.js ships glibc binaries only: use a glibc distribution (Debian, Ubuntu, RHEL) or the image (node:24-trixie-slim)';
  else if (major > 20 && olderThan(r.glibc, '2.38'))
    fix = `uWebSockets.js v20.57, the build for Node ${major}, needs glibc 2.38 or newer: run on a newer host (Debian 13, Ubuntu 24.04, RHEL 10) or the image, or use Node 20 here (v20.30 loads on older glibc)`;
  else if (![20, 22, 24].includes(major)) fix = 'use Node.js 24 (or 22, 20) LTS: the installed uWebSockets.js builds have no binary for this Node';
  else fix = 'run `npm ci` again: the uWebSockets.js packages are missing or incomplete';
  return `uWebSockets.js cannot load on ${where}: ${fix}`;
}

/** Whether glibc version `v` ("2.36") is older than `than` ("2.38"). */
function olderThan(v: string, than: string): boolean {
  const [a = 0, b = 0] = v.split('.').map(Number);
  const [c = 0, d = 0] = than.split('.').map(Number);
  return a < c || (a === c && b < d);
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0]!;
}

/**
 * What a worker's environment needs before uWebSockets.js loads: v20.57 reads its header block limit
 * from UWS_HTTP_MAX_HEADERS_SIZE once, when its binary loads (4096 when unset), and answers 431 beyond
 * it. v20.30 has no such setting (it closes a connection whose header block outgrows its buffer).
 */
export function uwsWorkerEnv(maxHeaderBytes: number): Record<string, string> {
  return { UWS_HTTP_MAX_HEADERS_SIZE: String(maxHeaderBytes) };
}

let chosen: UwsBuild | null = null;

/** This process's build, chosen at the first call. Throws UwsUnavailable. */
export function uwsBuild(): UwsBuild {
  chosen ??= chooseUwsBuild(currentRuntime());
  return chosen;
}

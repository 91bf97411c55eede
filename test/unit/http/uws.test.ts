// Which uWebSockets.js build a runtime gets (src/http/uws.ts): the real one on this machine, and what a
// runtime where no build loads is told.
import { describe, expect, it } from 'vitest';
import { chooseUwsBuild, currentRuntime, UwsUnavailable, uwsBuild, type Runtime } from '../../../src/http/uws.js';

const runtime = (over: Partial<Runtime>): Runtime => ({ node: 'v24.21.0', abi: '137', glibc: '2.36', platform: 'linux-x64', ...over });
const nothingLoads = (path: string): never => {
  throw new Error(`cannot load ${path}`);
};
const messageFor = (r: Runtime): string => {
  try {
    chooseUwsBuild(r, nothingLoads);
  } catch (err) {
    expect(err).toBeInstanceOf(UwsUnavailable);
    return (err as Error).message;
  }
  throw new Error('a build loaded');
};

describe('the uWebSockets.js build', () => {
  it('loads a native build on this runtime, never the JavaScript stand-in: v20.57 where glibc is 2.38 or newer, else v20.30 on Node 20', () => {
    const r = currentRuntime();
    const build = uwsBuild();
    expect(typeof build.uws.App).toBe('function');
    expect(typeof build.uws.us_listen_socket_close).toBe('function');
    // The stand-in of v20.30's package is plain JavaScript and has no native version string.
    const [major, minor] = (r.glibc ?? '0.0').split('.').map(Number) as [number, number];
    expect(build.version).toBe(major > 2 || (major === 2 && minor >= 38) ? '20.57.0' : '20.30.0');
  });

  it("tries v20.57 first, then v20.30, each binary for the runtime's ABI by its path", () => {
    const tried: string[] = [];
    const build = chooseUwsBuild(runtime({ node: 'v20.20.2', abi: '115' }), (path) => {
      tried.push(path);
      if (tried.length === 1) throw new Error("version `GLIBC_2.38' not found");
      return { App: () => null };
    });
    expect(build.version).toBe('20.30.0');
    expect(tried.map((p) => p.split('node_modules/')[1])).toEqual(['uWebSockets.js/uws_linux_x64_115.node', 'uws-20.30/binaries/uws_linux_x64_115.node']);
  });

  it("where none loads, says which Node and glibc, and what to install, with each build's own error", () => {
    let attempts: unknown;
    try {
      chooseUwsBuild(runtime({}), nothingLoads);
    } catch (err) {
      attempts = (err as UwsUnavailable).attempts;
    }
    expect(attempts).toEqual([
      { version: '20.57.0', error: expect.stringMatching(/^cannot load .*uws_linux_x64_137\.node$/) },
      { version: '20.30.0', error: expect.stringMatching(/^cannot load .*uws_linux_x64_137\.node$/) },
    ]);
    expect(messageFor(runtime({}))).toBe(
      'uWebSockets.js cannot load on Node v24.21.0 on linux-x64 with glibc 2.36: uWebSockets.js v20.57, the build for Node 24, needs glibc 2.38 or newer: run on a newer host (Debian 13, Ubuntu 24.04, RHEL 10) or the image, or use Node 20 here (v20.30 loads on older glibc)',
    );
    expect(messageFor(runtime({ glibc: null }))).toMatch(/with a C library other than glibc: .*use a glibc distribution/);
    expect(messageFor(runtime({ node: 'v23.1.0', abi: '131', glibc: '2.41' }))).toMatch(/use Node.js 24 \(or 22, 20\) LTS/);
    expect(messageFor(runtime({ platform: 'darwin-arm64', glibc: null }))).toMatch(/runs on Linux/);
  });
});

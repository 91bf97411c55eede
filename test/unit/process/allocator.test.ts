// WORKER_MALLOC: which malloc the workers are forked with, decided from what is installed.
import { describe, expect, it } from 'vitest';
import { JEMALLOC_PATHS, workerMalloc } from '../../../src/host-resources.js';
import { workerMallocEnv } from '../../../src/process/allocator.js';
import { loadConfig } from '../../../src/config.js';

const installed = (path: string) => (p: string) => p === path;
const nothing = () => false;
const arm64 = JEMALLOC_PATHS[1];

describe('WORKER_MALLOC', () => {
  it('auto: jemalloc wherever it is installed, preloaded into the workers', () => {
    const malloc = workerMalloc('auto', {}, installed(arm64))!;
    expect(malloc).toMatchObject({ name: 'jemalloc', preload: arm64 });
    expect(workerMallocEnv(malloc, {})).toEqual({ LD_PRELOAD: arm64 });
  });

  it('auto: the system malloc, and why, when jemalloc is not installed', () => {
    const malloc = workerMalloc('auto', {}, nothing)!;
    expect(malloc).toMatchObject({ name: 'system', preload: null });
    expect(malloc.reason).toContain('apt-get install libjemalloc2');
    expect(workerMallocEnv(malloc, {})).toEqual({});
  });

  it("auto: leaves an operator's own LD_PRELOAD alone", () => {
    const env = { LD_PRELOAD: '/opt/tcmalloc.so' };
    const malloc = workerMalloc('auto', env, installed(JEMALLOC_PATHS[0]))!;
    expect(malloc.name).toBe('system');
    expect(workerMallocEnv(malloc, env)).toEqual({});
  });

  it("jemalloc: preloaded ahead of an operator's own LD_PRELOAD", () => {
    const env = { LD_PRELOAD: '/opt/hook.so' };
    const malloc = workerMalloc('jemalloc', env, installed(JEMALLOC_PATHS[0]))!;
    expect(workerMallocEnv(malloc, env)).toEqual({ LD_PRELOAD: `${JEMALLOC_PATHS[0]} /opt/hook.so` });
  });

  it('system: nothing preloaded, whatever is installed', () => {
    const malloc = workerMalloc('system', {}, () => true)!;
    expect(malloc).toMatchObject({ name: 'system', preload: null });
  });

  it('jemalloc when it is not installed: no allocator (loadConfig stops with WORKER_MALLOC named)', () => {
    expect(workerMalloc('jemalloc', {}, nothing)).toBeNull();
  });

  it('refuses anything but auto, jemalloc and system', () => {
    expect(() => loadConfig({ WORKER_MALLOC: 'tcmalloc' })).toThrow(/WORKER_MALLOC/);
  });
});

/** The file's blocks up to `bytes` allocated (posix_fallocate); throws an errno error (ENOSPC...). */
export function allocateFile(fd: number, bytes: number): void;
/** The file's first `bytes` bytes as memory shared with it (MAP_SHARED). */
export function mapFile(fd: number, bytes: number): ArrayBuffer;
/** Detaches what mapFile returned, and unmaps it now. */
export function unmapFile(map: ArrayBuffer): void;
/** CRC-32C (Castagnoli) of `first`, then `second`: one call for a record's head and data. */
export function crc32c(first: Uint8Array, second?: Uint8Array): number;
/** Whether crc32c uses the CPU's instruction. */
export const hardware: boolean;

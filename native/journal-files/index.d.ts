/** The file's blocks up to `bytes` allocated (posix_fallocate); throws an errno error (ENOSPC...). */
export function allocateFile(fd: number, bytes: number): void;
/** The file's first `bytes` bytes as memory shared with it (MAP_SHARED). */
export function mapFile(fd: number, bytes: number): ArrayBuffer;
/** Detaches what mapFile returned, and unmaps it now. */
export function unmapFile(map: ArrayBuffer): void;
/** CRC-32C (Castagnoli) of `first`, then `second`: one call for a record's head and data. */
export function crc32c(first: Uint8Array, second?: Uint8Array): number;
/** Writes a record's two checks into its head's first `headBytes` bytes (src/journal/record.ts): the body's at byte 32, then the header's at byte 4. */
export function sealRecord(head: Uint8Array, headBytes: number, data: Uint8Array): void;
/** An exclusive flock(2) on the file, without waiting: true, or false when another open of it holds the lock. */
export function lockFile(fd: number): boolean;
/** Whether crc32c uses the CPU's instruction. */
export const hardware: boolean;

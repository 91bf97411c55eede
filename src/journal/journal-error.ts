/**
 * The journal cannot take or keep records; the message says which file and why. `full`: the disk
 * refused a write for room (ENOSPC, EDQUOT), which keeps nothing of the record and passes once there
 * is room again; otherwise the journal has failed (an I/O error, a failed fdatasync) and takes
 * nothing more: the worker is restarted and recovers from what the disk holds (docs/reliability.md,
 * "A disk that fails").
 */
export class JournalError extends Error {
  readonly full: boolean;
  constructor(message: string, options?: { cause?: unknown; full?: boolean }) {
    super(message, options);
    this.name = 'JournalError';
    this.full = options?.full ?? false;
  }
}

/** Whether a file operation failed for want of room, which passes once room is made: ENOSPC, EDQUOT. */
export function isNoRoom(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}
